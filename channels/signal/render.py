"""The model's Markdown as Signal text with style ranges, split to Signal's limit.

Signal has no markup in the text: formatting travels beside it as ranges
``start:length:STYLE`` in UTF-16 code units, STYLE one of BOLD, ITALIC, SPOILER,
STRIKETHROUGH, MONOSPACE (signal-cli ``send --text-style``, JSON-RPC ``textStyle``).
So rendering walks markdown-it's tokens once, writing the visible text and recording
where each style starts and ends: ``**b**`` BOLD, ``*i*`` ITALIC, ``~~s~~``
STRIKETHROUGH, code spans and fenced blocks MONOSPACE, headings BOLD, block quotes
ITALIC; lists become bullets, links ``text (url)``.

The limit is signal-cli's ``MAX_MESSAGE_SIZE_BYTES`` (2000 UTF-8 bytes): a longer body
is cut there and the rest uploaded as a long-text attachment, which the styles do not
cover. Chunks stay under it, so each message is one plain body with its own ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from channels.base import Chunk
from channels.chunks import Rendered, resplit_chunks, visible
from channels.mdwalk import BlockWalker
from channels.split import utf8_len, utf16_len

#: signal-cli ServiceConfig.MAX_MESSAGE_SIZE_BYTES
SIGNAL_TEXT_LIMIT = 2000

_STYLES = {"strong": "BOLD", "em": "ITALIC", "s": "STRIKETHROUGH"}


@dataclass(frozen=True)
class SignalChunk(Chunk):
    """A chunk plus its style ranges (``"start:length:STYLE"``, UTF-16 units)."""

    styles: tuple[str, ...] = ()


class _Styler(BlockWalker):
    """Walks markdown-it tokens into plain text and style ranges."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = 0  # UTF-16 units written so far
        self.open: list[tuple[str, int]] = []
        self.ranges: list[tuple[int, int, str]] = []

    def emit(self, text: str) -> None:
        if text:
            super().emit(text)
            self.pos += utf16_len(text)

    def start(self, style: str) -> None:
        self.open.append((style, self.pos))

    def end(self, style: str) -> None:
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i][0] == style:
                _, begin = self.open.pop(i)
                if self.pos > begin:
                    self.ranges.append((begin, self.pos - begin, style))
                return

    def render(self, markdown: str) -> tuple[str, list[str]]:
        self.walk(markdown)
        text = "".join(self.out)
        body = text.rstrip("\n")
        size = utf16_len(body)
        styles = []
        for begin, length, style in sorted(self.ranges):
            length = min(length, size - begin)
            if length > 0:
                styles.append(f"{begin}:{length}:{style}")
        return body, styles

    def heading(self, opening: bool) -> None:
        (self.start if opening else self.end)("BOLD")

    def quote(self, opening: bool) -> None:
        (self.start if opening else self.end)("ITALIC")

    def code_block(self, t: Token) -> None:
        self.start("MONOSPACE")
        self.emit(t.content.rstrip("\n"))
        self.end("MONOSPACE")

    def inline(self, children: Sequence[Token]) -> None:
        links: list[str] = []
        for c in children:
            kind = c.type
            if kind in ("text", "html_inline"):
                self.emit(c.content)
            elif kind in ("softbreak", "hardbreak"):
                self.emit("\n")
            elif kind == "code_inline":
                self.start("MONOSPACE")
                self.emit(c.content)
                self.end("MONOSPACE")
            elif kind.endswith("_open") and kind[:-5] in _STYLES:
                self.start(_STYLES[kind[:-5]])
            elif kind.endswith("_close") and kind[:-6] in _STYLES:
                self.end(_STYLES[kind[:-6]])
            elif kind == "link_open":
                links.append(str(c.attrGet("href") or ""))
            elif kind == "link_close":
                href = links.pop() if links else ""
                if href:
                    self.emit(f" ({href})")
            elif kind == "image":
                src = str(c.attrGet("src") or "")
                self.emit(f"{c.content or 'image'} ({src})" if src else c.content or "image")


def to_styled(markdown: str) -> tuple[str, list[str]]:
    """The visible text of ``markdown`` and its Signal style ranges."""
    return _Styler().render(markdown)


def _render(piece: str) -> Rendered:
    text, styles = to_styled(piece)
    if not visible(text):  # signal-cli refuses an empty message
        return None, utf8_len(text)
    return SignalChunk(text=text, plain=text, formatted=bool(styles),
                       styles=tuple(styles)), utf8_len(text)


def render_chunks(markdown: str, limit: int = SIGNAL_TEXT_LIMIT) -> list[Chunk]:
    """The reply's chunks, each one's text within ``limit`` bytes."""
    return resplit_chunks(markdown, limit, utf8_len, _render)

"""The model's Markdown as Telegram HTML, split to Telegram's limit.

Telegram's HTML mode accepts a small tag set (https://core.telegram.org/bots/api#html-style):
b/strong, i/em, u/ins, s/strike/del, a href, code, pre (with an inner
``code class="language-x"``), blockquote, tg-spoiler; entities ``&lt; &gt; &amp; &quot;``
and numeric ones. Everything else in the text must be escaped. Headings, lists and rules
have no tags, so they become bold lines, bullets and a line of dashes.

markdown-it-py parses (CommonMark + strikethrough); this module only walks its tokens.
The same walk without tags gives the plain-text fallback sent when Telegram still
rejects the formatting.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from markdown_it.token import Token

from channels.base import Chunk
from channels.chunks import Rendered, resplit_chunks, visible
from channels.mdwalk import BlockWalker
from channels.split import utf16_len

#: Telegram's sendMessage text limit, in UTF-16 code units after entity parsing
#: (https://core.telegram.org/bots/api#sendmessage). Measuring the HTML itself is
#: stricter, so a chunk that fits here always fits there.
TELEGRAM_TEXT_LIMIT = 4096

_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")

_INLINE_TAGS = {
    "strong_open": "<b>",
    "strong_close": "</b>",
    "em_open": "<i>",
    "em_close": "</i>",
    "s_open": "<s>",
    "s_close": "</s>",
}


class _Walker(BlockWalker):
    """Renders markdown-it tokens as Telegram HTML (``tags=True``) or plain text."""

    def __init__(self, tags: bool) -> None:
        super().__init__()
        self.tags = tags
        self.in_heading = False  # headings are bold already; Telegram dislikes <b><b>

    def esc(self, text: str) -> str:
        return html.escape(text, quote=False) if self.tags else text

    def tag(self, markup: str) -> None:
        if self.tags:
            self.out.append(markup)

    def render(self, markdown: str) -> str:
        self.walk(markdown)
        return "".join(self.out).strip("\n")

    def heading(self, opening: bool) -> None:
        self.tag("<b>" if opening else "</b>")
        self.in_heading = opening

    def quote(self, opening: bool) -> None:
        if opening:
            self.tag("<blockquote>")
            self.fresh = True
            return
        while self.out and self.out[-1].strip("\n") == "":
            self.out.pop()
        if self.out:
            self.out[-1] = self.out[-1].rstrip("\n")
        self.tag("</blockquote>")
        self.fresh = False

    def code_block(self, t: Token) -> None:
        language = (t.info or "").split()[0] if t.info else ""
        if self.tags:
            css = f' class="language-{html.escape(language)}"' if language else ""
            self.out.append(f"<pre><code{css}>{self.esc(t.content.rstrip(chr(10)))}</code></pre>")
        else:
            self.out.append(t.content.rstrip("\n"))
        self.fresh = False

    def inline(self, children: Sequence[Token]) -> None:
        links: list[str | None] = []
        for c in children:
            kind = c.type
            if kind == "text" or kind == "html_inline":
                self.emit(self.esc(c.content))
            elif kind in ("softbreak", "hardbreak"):
                self.emit("\n")
            elif kind == "code_inline":
                self.tag("<code>")
                self.emit(self.esc(c.content))
                self.tag("</code>")
            elif kind in _INLINE_TAGS:
                if not (self.in_heading and kind.startswith("strong")):
                    self.tag(_INLINE_TAGS[kind])
            elif kind == "link_open":
                href = str(c.attrGet("href") or "")
                safe = href if href.lower().startswith(_SAFE_SCHEMES) else None
                links.append(safe)
                if safe:
                    self.tag(f'<a href="{html.escape(safe, quote=True)}">')
            elif kind == "link_close":
                href_or_none = links.pop() if links else None
                if href_or_none:
                    self.tag("</a>")
                    if not self.tags:
                        self.emit(f" ({href_or_none})")
            elif kind == "image":
                alt = c.content or "image"
                src = str(c.attrGet("src") or "")
                self.emit(self.esc(f"{alt} ({src})" if src else alt))


def to_html(markdown: str) -> str:
    """Telegram HTML for ``markdown``: only Telegram's tags, everything else escaped."""
    return _Walker(tags=True).render(markdown)


def to_plain(markdown: str) -> str:
    """What ``to_html`` shows, without markup (link targets in parentheses)."""
    return _Walker(tags=False).render(markdown)


def _render(piece: str) -> Rendered:
    formatted, plain = to_html(piece), to_plain(piece)
    # Telegram rejects empty messages; whitespace-only pieces go
    chunk = Chunk(text=formatted, plain=plain) if visible(plain) else None
    return chunk, max(utf16_len(formatted), utf16_len(plain))


def render_chunks(markdown: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[Chunk]:
    """The reply's chunks: each one's text and plain fallback measure at most ``limit``
    UTF-16 units."""
    return resplit_chunks(markdown, limit, utf16_len, _render)

"""The model's Markdown as a Matrix message: ``org.matrix.custom.html`` plus a plain body.

Matrix clients render a subset of HTML (spec "m.room.message msgtypes", m.text: h1-h6,
p, a, ul, ol, li, blockquote, pre, code, strong, em, del, hr, br, table ...), which is
what CommonMark produces, so markdown-it-py renders straight to it. Raw HTML in the
model's text is escaped (``html=False``), and markdown-it drops ``javascript:`` style
links. The plain ``body`` is the Markdown itself, as Matrix clients send it.

Size: an event may be at most 65536 bytes as canonical JSON (spec "Size limits"), and
it carries both the body and the HTML. A chunk keeps each of them within
``MATRIX_TEXT_LIMIT`` UTF-8 bytes, which leaves ample room for JSON escaping and the
event envelope, and keeps one message readable.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from channels.base import Chunk
from channels.split import split_text

MATRIX_TEXT_LIMIT = 8000

_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])
_BLANK = re.compile(r"\S")


def utf8_len(text: str) -> int:
    """Bytes as the homeserver counts them (the event size limit is in bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


def to_html(markdown: str) -> str:
    """Matrix HTML for ``markdown`` (``org.matrix.custom.html``)."""
    rendered: str = _PARSER.render(markdown)
    return rendered.strip("\n")


def render_chunks(markdown: str, limit: int = MATRIX_TEXT_LIMIT) -> list[Chunk]:
    """Split the Markdown (fences kept whole or closed and reopened), then render each
    piece; a piece whose HTML outgrew ``limit`` is split again smaller. Whitespace-only
    pieces are dropped (an empty message shows nothing)."""
    chunks: list[Chunk] = []
    pending = split_text(markdown, limit, utf8_len)
    pending.reverse()
    while pending:
        piece = pending.pop()
        formatted = to_html(piece)
        size = utf8_len(formatted)
        if size > limit:
            smaller = max(1, int(utf8_len(piece) * limit / size * 0.9))
            smaller = min(smaller, utf8_len(piece) - 1)
            pending.extend(reversed(split_text(piece, max(8, smaller), utf8_len)))
            continue
        plain = piece.strip("\n")
        if _BLANK.search(plain):
            chunks.append(Chunk(text=formatted, plain=plain))
    return chunks

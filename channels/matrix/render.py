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

from channels.base import Chunk
from channels.chunks import Rendered, resplit_chunks, visible
from channels.markup import MARKDOWN
from channels.split import utf8_len

MATRIX_TEXT_LIMIT = 8000


def to_html(markdown: str) -> str:
    """Matrix HTML for ``markdown`` (``org.matrix.custom.html``)."""
    rendered: str = MARKDOWN.render(markdown)
    return rendered.strip("\n")


def _render(piece: str) -> Rendered:
    formatted = to_html(piece)
    plain = piece.strip("\n")
    return (Chunk(text=formatted, plain=plain) if visible(plain) else None,
            utf8_len(formatted))


def render_chunks(markdown: str, limit: int = MATRIX_TEXT_LIMIT) -> list[Chunk]:
    """The reply's chunks, each one's HTML within ``limit`` bytes. Whitespace-only
    pieces are dropped (an empty message shows nothing)."""
    return resplit_chunks(markdown, limit, utf8_len, _render, floor=8)

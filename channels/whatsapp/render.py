"""The model's Markdown to WhatsApp text messages.

WhatsApp formats inside the text itself: ``*bold*``, ``_italic_``, ``~strike~``,
```` ```monospace``` ````, `` `inline code` ``, ``> quote``, ``- `` and ``1. `` lists
(faq.whatsapp.com/539178204879377). There is no escaping and no parse mode, so
a message never fails for its formatting: ``Chunk.formatted`` only says the text was
converted. Links have no markup and become ``label (url)``. A text message's body
holds at most 4096 characters (Cloud API messages reference, ``text.body``).
"""

from __future__ import annotations

from channels.base import Chunk
from channels.markup import StarMarkup
from channels.split import Span, split_spans

__all__ = ["WHATSAPP_TEXT_LIMIT", "render_chunks", "to_whatsapp"]

WHATSAPP_TEXT_LIMIT = 4096
#: below this budget a piece is sent as its raw Markdown instead of shrinking further
_MIN_BUDGET = 64


class _WhatsApp(StarMarkup):
    """No escaping; links and images have no markup and read ``label (url)``."""

    def link(self, href: str, label: str) -> str:
        return href if label in ("", href) else f"{label} ({href})"

    def image(self, src: str, alt: str) -> str:
        return f"{alt} ({src})" if alt else src


_WHATSAPP = _WhatsApp()


def to_whatsapp(markdown: str) -> str:
    """Convert CommonMark (plus strikethrough and tables) to WhatsApp's formatting.
    Pure; blocks are separated by one blank line; unknown constructs keep their text."""
    return _WHATSAPP.render(markdown)


def _chunk(text: str, span: Span) -> Chunk | None:
    plain = text[span.start : span.end]
    if not plain.strip():
        return None
    formatted = to_whatsapp(span.render(text))
    if not formatted.strip():
        # nothing visible after conversion (e.g. only a link definition): keep the words
        return Chunk(text=plain, plain=plain, formatted=False)
    return Chunk(text=formatted, plain=plain)


def render_chunks(text: str, limit: int = WHATSAPP_TEXT_LIMIT) -> list[Chunk]:
    """Split the Markdown to ``limit`` and convert each piece; pure.

    Splitting happens on the Markdown, so a cut code fence is closed and reopened and
    each piece converts on its own. ``Chunk.plain`` is the piece's raw slice. A piece
    that conversion grew past the limit (a bare link becoming ``label (url)``) makes
    the whole text re-split with a smaller budget; whitespace-only pieces are dropped
    (the API refuses an empty body).
    """
    budget = limit
    while budget >= _MIN_BUDGET:
        chunks = [c for span in split_spans(text, budget) if (c := _chunk(text, span))]
        if all(len(c.text) <= limit and len(c.plain) <= limit for c in chunks):
            return chunks
        budget = budget * 4 // 5
    return [
        Chunk(text=piece, plain=piece, formatted=False)
        for span in split_spans(text, limit)
        if (piece := text[span.start : span.end]).strip()
    ]

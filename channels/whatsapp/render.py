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
from channels.chunks import fit_chunks
from channels.markup import StarMarkup

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


def render_chunks(text: str, limit: int = WHATSAPP_TEXT_LIMIT) -> list[Chunk]:
    """Split the Markdown to ``limit`` and convert each piece
    (``channels.chunks.fit_chunks``); a bare link becoming ``label (url)`` is what can
    grow a piece. Pure."""
    return fit_chunks(text, limit, to_whatsapp, min_budget=_MIN_BUDGET)

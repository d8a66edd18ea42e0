"""The model's Markdown as a mail body: HTML for the text/html part, the Markdown
itself (readable as it is) for the text/plain part.

Mail has no hard size limit, but a reply is one mail of at most ``EMAIL_TEXT_LIMIT``
characters of HTML: Gmail clips bodies past 102 KB, phones show a few screens, and a
longer answer reads better as consecutive mails in the thread than as one wall.
"""

from __future__ import annotations

from channels.base import Chunk
from channels.chunks import fit_chunks
from channels.markup import MARKDOWN

EMAIL_TEXT_LIMIT = 10_000
#: below this budget a piece is sent as plain text instead of shrinking further
_MIN_BUDGET = 256


def to_html(markdown: str) -> str:
    return str(MARKDOWN.render(markdown))


def render_chunks(text: str, limit: int = EMAIL_TEXT_LIMIT) -> list[Chunk]:
    """Split the Markdown at ``limit`` (paragraph, line, sentence, word; fences closed
    and reopened) and render each piece to HTML (``channels.chunks.fit_chunks``). Pure:
    the same text gives the same chunks."""
    return fit_chunks(text, limit, to_html, min_budget=_MIN_BUDGET)

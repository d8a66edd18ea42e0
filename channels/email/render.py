"""The model's Markdown as a mail body: HTML for the text/html part, the Markdown
itself (readable as it is) for the text/plain part.

Mail has no hard size limit, but a reply is one mail of at most ``EMAIL_TEXT_LIMIT``
characters of HTML: Gmail clips bodies past 102 KB, phones show a few screens, and a
longer answer reads better as consecutive mails in the thread than as one wall.
"""

from __future__ import annotations

from markdown_it import MarkdownIt

from channels.base import Chunk
from channels.split import Span, split_spans

EMAIL_TEXT_LIMIT = 10_000
#: below this budget a piece is sent as plain text instead of shrinking further
_MIN_BUDGET = 256
# raw HTML in the model's output is shown as text, never passed through
_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


def to_html(markdown: str) -> str:
    return str(_PARSER.render(markdown))


def _chunk(text: str, span: Span) -> Chunk | None:
    plain = text[span.start : span.end]
    if not plain.strip():
        return None
    return Chunk(text=to_html(span.render(text)), plain=plain)


def render_chunks(text: str, limit: int = EMAIL_TEXT_LIMIT) -> list[Chunk]:
    """Split the Markdown at ``limit`` (paragraph, line, sentence, word; fences closed
    and reopened) and render each piece to HTML; re-split smaller while a piece's HTML
    outgrows the limit. Pure: the same text gives the same chunks."""
    budget = limit
    while budget >= _MIN_BUDGET:
        chunks = [c for span in split_spans(text, budget) if (c := _chunk(text, span))]
        if all(len(c.text) <= limit for c in chunks):
            return chunks
        budget = budget * 4 // 5
    return [
        Chunk(text=piece, plain=piece, formatted=False)
        for span in split_spans(text, limit)
        if (piece := text[span.start : span.end]).strip()
    ]

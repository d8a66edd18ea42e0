"""Split the model's Markdown into chunks that still fit once converted.

Slack (mrkdwn), WhatsApp (star markup) and email (HTML) convert each piece after
splitting, and the conversion can grow a piece (escaping, ``label (url)``, tags).
``fit_chunks`` is their one loop: split on the Markdown (so a cut code fence is closed
and reopened and each piece converts on its own), convert, and while a converted piece
outgrows the limit re-split the whole text with a 4/5 budget; below ``min_budget``
send plain pieces, which nothing grows. Telegram, Discord and Signal measure and
split differently (UTF-16 / UTF-8 lengths, entity offsets) and keep their own.
"""

from __future__ import annotations

from collections.abc import Callable

from channels.base import Chunk
from channels.split import split_spans

__all__ = ["fit_chunks"]


def fit_chunks(
    text: str, limit: int, convert: Callable[[str], str], *, min_budget: int
) -> list[Chunk]:
    """The chunks of ``text``, each ``convert``-ed and at most ``limit`` long; pure.

    ``Chunk.plain`` is the piece's raw slice of the input (no reopened fences), so the
    plain chunks join back to exactly the input. A piece with nothing visible after
    conversion (only a link definition, say) keeps its words as plain text;
    whitespace-only pieces are dropped (the platforms refuse empty messages).
    """
    budget = limit
    while budget >= min_budget:
        chunks: list[Chunk] = []
        for span in split_spans(text, budget):
            plain = text[span.start : span.end]
            if not plain.strip():
                continue
            formatted = convert(span.render(text))
            if formatted.strip():
                chunks.append(Chunk(text=formatted, plain=plain))
            else:
                chunks.append(Chunk(text=plain, plain=plain, formatted=False))
        if all(len(c.text) <= limit and len(c.plain) <= limit for c in chunks):
            return chunks
        budget = budget * 4 // 5
    return [
        Chunk(text=piece, plain=piece, formatted=False)
        for span in split_spans(text, limit)
        if (piece := text[span.start : span.end]).strip()
    ]

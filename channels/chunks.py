"""Split the model's Markdown into chunks that still fit once converted.

Slack (mrkdwn), WhatsApp (star markup) and email (HTML) convert each piece after
splitting, and the conversion can grow a piece (escaping, ``label (url)``, tags).
``fit_chunks`` is their one loop: split on the Markdown (so a cut code fence is closed
and reopened and each piece converts on its own), convert, and while a converted piece
outgrows the limit re-split the whole text with a 4/5 budget; below ``min_budget``
send plain pieces, which nothing grows.

Telegram, Matrix and Signal measure in UTF-16 units or UTF-8 bytes and render pieces
that must each stand alone (HTML, style ranges): ``resplit_chunks`` is their one loop,
re-splitting only the piece that outgrew the limit. Discord keeps its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from channels.base import Chunk
from channels.split import Measure, split_spans, split_text

__all__ = ["fit_chunks", "resplit_chunks", "visible"]

#: what ``resplit_chunks`` renders a piece into: its chunk (None: nothing to show, the
#: platform refuses an empty message) and its rendered size, in the limit's unit
Rendered = tuple[Chunk | None, int]

_VISIBLE = re.compile(r"\S")


def visible(text: str) -> bool:
    """Whether ``text`` shows anything: the platforms refuse a whitespace-only message."""
    return _VISIBLE.search(text) is not None


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


def resplit_chunks(
    markdown: str,
    limit: int,
    measure: Measure,
    render: Callable[[str], Rendered],
    *,
    floor: int = 2,
) -> list[Chunk]:
    """Split ``markdown`` (fences kept whole, or closed and reopened), then ``render``
    each piece; a piece whose rendering outgrew ``limit`` (escaping, tags) is split again,
    smaller by the ratio it grew (less a tenth), never below ``floor`` units. Pure: the
    same Markdown gives the same chunks, so a retried send is identical."""
    chunks: list[Chunk] = []
    pending = split_text(markdown, limit, measure)
    pending.reverse()
    while pending:
        piece = pending.pop()
        chunk, size = render(piece)
        if size > limit:
            n = measure(piece)
            smaller = max(floor, min(n - 1, int(n * limit / size * 0.9)))
            pending.extend(reversed(split_text(piece, smaller, measure)))
        elif chunk is not None:
            chunks.append(chunk)
    return chunks

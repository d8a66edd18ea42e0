"""Outbound text to Slack message chunks.

Limit: each chunk's mrkdwn goes in one Block Kit ``section`` block, whose text field
allows at most 3000 characters (https://docs.slack.dev/reference/block-kit/blocks/section-block).
chat.postMessage's top-level ``text`` (used here as the notification and plain
fallback) is truncated only past 40,000 characters and Slack recommends staying under
4,000 (https://docs.slack.dev/reference/methods/chat.postMessage), so 3000 is the
binding limit. Slack counts characters, so ``len`` is the measure.
"""

from __future__ import annotations

from channels.base import Chunk
from channels.slack.mrkdwn import to_mrkdwn
from channels.split import Span, split_spans

__all__ = ["SLACK_SECTION_LIMIT", "render_chunks"]

SLACK_SECTION_LIMIT = 3000
#: Escaping can grow text at most fivefold ("&" -> "&amp;"); below this budget the
#: text is sent unformatted instead of shrinking further.
_MIN_BUDGET = 64


def _chunk(text: str, span: Span) -> Chunk | None:
    plain = text[span.start : span.end]
    if not plain.strip():
        return None
    formatted = to_mrkdwn(span.render(text))
    if not formatted.strip():
        # Nothing visible after conversion (e.g. only a link definition): keep the words.
        return Chunk(text=plain, plain=plain, formatted=False)
    return Chunk(text=formatted, plain=plain)


def render_chunks(text: str, limit: int = SLACK_SECTION_LIMIT) -> list[Chunk]:
    """Split the model's Markdown to ``limit`` and convert each piece to mrkdwn.

    Splitting happens on the Markdown, so a cut code fence is closed and reopened as
    Markdown and each piece converts on its own. ``Chunk.plain`` is the piece's raw
    slice of the input (no reopened fences), so the plain chunks join back to exactly
    the input; ``send_chunk`` escapes it for Slack. When escaping grows a piece past
    the limit, the whole text is re-split with a smaller budget. Pure: the same text
    always gives the same chunks. Whitespace-only pieces are dropped (Slack rejects
    empty messages with ``no_text``).
    """
    budget = limit
    while budget >= _MIN_BUDGET:
        chunks = [c for span in split_spans(text, budget) if (c := _chunk(text, span))]
        if all(len(c.text) <= limit for c in chunks):
            return chunks
        budget = budget * 4 // 5
    # Pathological input (thousands of '&'): plain text, which nothing can grow past
    # the limit once sent (send_chunk's escaping goes to the 40k ``text`` field).
    return [
        Chunk(text=piece, plain=piece, formatted=False)
        for span in split_spans(text, limit)
        if (piece := text[span.start : span.end]).strip()
    ]

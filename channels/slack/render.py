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
from channels.slack.mrkdwn import escape, to_mrkdwn
from channels.split import split_text

__all__ = ["SLACK_SECTION_LIMIT", "render_chunks"]

SLACK_SECTION_LIMIT = 3000


def _fit(piece: str, limit: int) -> list[Chunk]:
    """Chunks for one split piece; re-split tighter when conversion grew it past the
    limit (escaping ``&`` to ``&amp;`` can)."""
    budget = limit
    while True:
        parts = split_text(piece, budget)
        formatted = [to_mrkdwn(part) for part in parts]
        if all(len(text) <= limit for text in formatted):
            return [
                Chunk(text=text, plain=escape(part))
                for part, text in zip(parts, formatted, strict=True)
                if text.strip()
            ]
        budget = budget * 4 // 5
        if budget < 64:
            # Pathological input (thousands of '&'): send plain, hard-cut to fit.
            plain = escape(piece)
            return [
                Chunk(text=cut, plain=cut, formatted=False)
                for cut in split_text(plain, limit)
                if cut.strip()
            ]


def render_chunks(text: str, limit: int = SLACK_SECTION_LIMIT) -> list[Chunk]:
    """Split the model's Markdown to ``limit`` and convert each piece to mrkdwn.

    Splitting happens on the Markdown (so fences are closed and reopened as Markdown
    and each piece converts on its own); ``plain`` is the piece's escaped Markdown.
    Pure: the same text always gives the same chunks. Whitespace-only pieces are
    dropped (Slack rejects empty messages with ``no_text``).
    """
    chunks: list[Chunk] = []
    for piece in split_text(text, limit):
        chunks.extend(_fit(piece, limit))
    return chunks

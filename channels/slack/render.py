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
from channels.chunks import fit_chunks
from channels.slack.mrkdwn import to_mrkdwn

__all__ = ["SLACK_SECTION_LIMIT", "render_chunks"]

SLACK_SECTION_LIMIT = 3000
#: Escaping can grow text at most fivefold ("&" -> "&amp;"); below this budget the
#: text is sent unformatted instead of shrinking further.
_MIN_BUDGET = 64


def render_chunks(text: str, limit: int = SLACK_SECTION_LIMIT) -> list[Chunk]:
    """Split the model's Markdown to ``limit`` and convert each piece to mrkdwn
    (``channels.chunks.fit_chunks``). ``send_chunk`` escapes ``Chunk.plain`` for Slack.
    Pathological input (thousands of '&') falls back to plain text, which nothing can
    grow past the limit once sent (send_chunk's escaping goes to the 40k ``text`` field).
    """
    return fit_chunks(text, limit, to_mrkdwn, min_budget=_MIN_BUDGET)

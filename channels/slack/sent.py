"""Which reply chunk a Slack message is, and finding one that arrived although its
chat.postMessage failed ambiguously (issue 30).

Slack's chat.postMessage has no idempotency key. Each chunk is posted with message
metadata (``metadata={"event_type": ..., "event_payload": {...}}``, documented under
"Message metadata") naming its reply id and chunk index; after a send that may have
reached Slack, ``find_posted`` reads the conversation's recent messages (or the
thread's replies) with ``include_all_metadata`` and returns the chunk's ``ts`` if it is
there. Needs the ``*:history`` scopes the app manifest already asks for.

Limits: only messages newer than ``LOOKBACK`` seconds and the newest ``LOOKUP_LIMIT``
are read (Slack caps non-Marketplace apps at 15 messages per history call); a chunk
buried deeper is not found and is posted again (at least once, never lost).
"""

from __future__ import annotations

import time
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

#: the metadata event type of a reply chunk (app-defined, namespaced to us)
EVENT_TYPE = "pynanoclaw_reply_chunk"
#: how far back a lookup reads, seconds: longer than the outbox's retries of one chunk
LOOKBACK = 15 * 60
#: messages read per lookup (Slack's per-call cap for non-Marketplace apps)
LOOKUP_LIMIT = 15


def chunk_metadata(reply_id: str, index: int) -> dict[str, Any]:
    """The ``metadata`` argument of chat.postMessage for chunk ``index`` of a reply."""
    return {"event_type": EVENT_TYPE, "event_payload": {"reply_id": reply_id, "index": index}}


def _is_chunk(message: dict[str, Any], reply_id: str, index: int) -> bool:
    meta = message.get("metadata")
    if not isinstance(meta, dict) or meta.get("event_type") != EVENT_TYPE:
        return False
    payload = meta.get("event_payload")
    return (isinstance(payload, dict) and payload.get("reply_id") == reply_id
            and payload.get("index") == index)


async def find_posted(web: AsyncWebClient, channel: str, thread_ts: str | None,
                      reply_id: str, index: int) -> str | None:
    """The ``ts`` of chunk ``index`` of ``reply_id`` if Slack has it, else None.
    Raises what the SDK raises (the caller maps it)."""
    oldest = f"{time.time() - LOOKBACK:.6f}"
    if thread_ts:
        response = await web.conversations_replies(
            channel=channel, ts=thread_ts, oldest=oldest, limit=LOOKUP_LIMIT,
            include_all_metadata=True)
    else:
        response = await web.conversations_history(
            channel=channel, oldest=oldest, limit=LOOKUP_LIMIT, include_all_metadata=True)
    messages = response.get("messages") or []
    for message in messages:
        if isinstance(message, dict) and _is_chunk(message, reply_id, index):
            return str(message.get("ts") or "") or None
    return None

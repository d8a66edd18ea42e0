"""Per-channel "newest message known durable", kept in the gateway's cursor store.

The Discord gateway has no cursor: what was sent while the bot was away (a restart,
or a session Discord would not resume) is not redelivered. These marks let the
adapter read that gap back through REST history after READY. A mark moves only after
the sink returned, so everything after it may be missing and nothing before it is.

Layout (keys inside the adapter's scoped store): ``channels`` holds the JSON list
of channel ids with a mark; ``last:<channel id>`` holds that channel's message id.
One small write per stored message, the index only when a channel is new.
"""

from __future__ import annotations

import json
import logging

from channels.base import CursorStore

log = logging.getLogger(__name__)

INDEX_KEY = "channels"


def _mark_key(channel_id: int) -> str:
    return f"last:{channel_id}"


class LastSeen:
    """Marks for at most ``max_channels`` channels, the least recently active dropped."""

    def __init__(self, store: CursorStore | None, max_channels: int = 500) -> None:
        self._store = store
        self._max = max_channels
        self._marks: dict[int, int] = {}

    @property
    def enabled(self) -> bool:
        return self._store is not None

    def marks(self) -> dict[int, int]:
        """Channel id -> newest message id known durable (a copy)."""
        return dict(self._marks)

    async def load(self) -> dict[int, int]:
        """Read every mark; unreadable entries are skipped (and logged)."""
        if self._store is None:
            return {}
        raw = await self._store.get(INDEX_KEY)
        try:
            ids = [int(x) for x in json.loads(raw)] if raw else []
        except (ValueError, TypeError):
            log.warning("discord: ignoring an unreadable channel index in the cursor store")
            ids = []
        marks: dict[int, int] = {}
        for channel_id in ids:
            value = await self._store.get(_mark_key(channel_id))
            if value and value.isdigit():
                marks[channel_id] = int(value)
        self._marks = marks
        return dict(marks)

    async def advance(self, channel_id: int, message_id: int) -> None:
        """Move ``channel_id``'s mark forward to ``message_id`` (never backward)."""
        if self._store is None or self._marks.get(channel_id, 0) >= message_id:
            return
        new_channel = channel_id not in self._marks
        self._marks[channel_id] = message_id
        await self._store.set(_mark_key(channel_id), str(message_id))
        if new_channel:
            if len(self._marks) > self._max:
                # snowflakes grow with time: the smallest mark is the stalest channel
                stalest = min(self._marks, key=self._marks.__getitem__)
                del self._marks[stalest]
            await self._store.set(INDEX_KEY, json.dumps(sorted(self._marks)))

"""A send rate limit shared by every gateway process: GCRA in one Lua script
(``gateway/queue/lua/gcra.lua``).

One bucket per channel+chat (``rl:{channel}:{chat}``), shaped by the channel's
``ChannelLimits``: ``burst`` sends may go at once, then one per ``per_chat_interval``
seconds. Redis' own clock decides, so processes on different machines agree.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from channels.base import ChannelLimits
from gateway.queue import GatewayQueue, Keys


class RateLimiter:
    """``await limiter.acquire(channel, chat_id, limits)`` returns when a send may go."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._q = GatewayQueue(client, keys)

    async def acquire(self, channel: str, chat_id: str, limits: ChannelLimits) -> float:
        """Wait for the chat's next send slot; returns the seconds waited."""
        interval_ms = int(limits.per_chat_interval * 1000)
        if interval_ms <= 0:
            return 0.0
        waited = 0.0
        while True:
            wait_ms = await self._q.rate_wait_ms(channel, chat_id, interval_ms,
                                                 max(limits.burst, 1))
            if wait_ms <= 0:
                return waited
            await asyncio.sleep(wait_ms / 1000)
            waited += wait_ms / 1000

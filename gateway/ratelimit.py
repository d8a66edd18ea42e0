"""A send rate limit shared by every gateway process: GCRA in one Lua script.

One bucket per channel+chat (``rl:{channel}:{chat}``), shaped by the channel's
``ChannelLimits``: ``burst`` sends may go at once, then one per ``per_chat_interval``
seconds. Redis' own clock decides, so processes on different machines agree.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from channels.base import ChannelLimits
from channels.keys import Keys

# KEYS: bucket   ARGV: interval ms, burst
# Returns 0 when a send may go now (and records it), else the ms to wait.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local tau = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
if now < tat - tau then return tat - tau - now end
local new_tat = tat + interval
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now + 1000)
return 0
"""


class RateLimiter:
    """``await limiter.acquire(channel, chat_id, limits)`` returns when a send may go."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._keys = keys
        self._script = client.register_script(_GCRA)

    async def acquire(self, channel: str, chat_id: str, limits: ChannelLimits) -> float:
        """Wait for the chat's next send slot; returns the seconds waited."""
        interval_ms = int(limits.per_chat_interval * 1000)
        if interval_ms <= 0:
            return 0.0
        waited = 0.0
        key = self._keys.rate(channel, chat_id)
        while True:
            wait_ms = int(await self._script(keys=[key], args=[interval_ms, max(limits.burst, 1)]))
            if wait_ms <= 0:
                return waited
            await asyncio.sleep(wait_ms / 1000)
            waited += wait_ms / 1000

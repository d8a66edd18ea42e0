"""The gateway's Redis client: one pool sized from the webhook concurrency the config
allows, which waits for a free connection instead of failing.

redis-py's asyncio pool holds 100 connections and raises ``MaxConnectionsError`` the
moment they are all in use: under 128 Telegram webhook requests in flight the webhook
answered 503 although Redis itself was idle (issue 30). Here the pool is a
``BlockingConnectionPool``: a request that finds every connection busy waits (Redis
commands take well under a millisecond, so the wait is short) up to ``POOL_TIMEOUT``,
and the pool is sized ``BASE_CONNECTIONS`` (the outbox's per-chat senders, the sweeper,
pollers, ``/healthz``) plus one connection per webhook request the platforms may make
at once (``Channel.webhook_concurrency``: Telegram's ``webhook_max_connections``).
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from channels.base import Channel

#: connections for everything but webhook requests (redis-py's own default pool size)
BASE_CONNECTIONS = 100
#: longest a command waits for a free connection, seconds; then ``redis.ConnectionError``
#: (a webhook answers 503 and the platform retries)
POOL_TIMEOUT = 5.0


def pool_size(channels: Iterable[Channel], base: int = BASE_CONNECTIONS) -> int:
    return base + sum(max(ch.webhook_concurrency(), 0) for ch in channels)


def connect(url: str, channels: Iterable[Channel], *, base: int = BASE_CONNECTIONS,
            timeout: float = POOL_TIMEOUT) -> aioredis.Redis:
    """A decoding client (strings in, strings out) on a blocking pool of ``pool_size``."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=pool_size(channels, base), timeout=timeout,
        decode_responses=True)
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose closes it

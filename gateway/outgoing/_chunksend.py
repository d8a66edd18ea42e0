"""One chunk to one platform, with the outbox's retry policy.

Sends wait for the chat's shared rate limit; on ``RateLimited`` they wait what the
platform asked; other transient errors are retried with jittered exponential backoff, up
to ``max_attempts``. A ``MaybeSent`` failure (the request may have reached the platform)
is counted and logged once per chunk, and before any re-send the channel is asked
whether the chunk arrived (``Channel.find_sent``). An unexpected adapter exception is
retried like a transient one; one that says Redis refuses writes is raised as it is, so
the chat waits in place (the outbox's ``_handle_in_order``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from channels.base import Channel, Chunk
from channels.errors import (
    FormattingRejected,
    MaybeSent,
    PermanentError,
    RateLimited,
    TransientError,
)
from channels.models import Outbound
from gateway.outgoing._delivery import DeliveryRecorder
from gateway.outgoing._ratelimit import RateLimiter
from gateway.queue import refused_write

log = logging.getLogger("gateway.outgoing._outbox")

_expo = wait_random_exponential(multiplier=0.5, max=30)


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, RateLimited):
        return max(float(exc.retry_after), 0.0)
    return float(_expo(state))


class Retryable(Exception):
    """Wraps an unexpected adapter exception so it is retried like a transient one."""


class ChunkSender:
    """Sends chunks through the rate limiter with retries; counts ambiguous sends."""

    def __init__(self, limiter: RateLimiter, outcomes: DeliveryRecorder, max_attempts: int,
                 on_ambiguous: Callable[[], None]) -> None:
        self._limiter = limiter
        self._outcomes = outcomes
        self._max_attempts = max_attempts
        self._on_ambiguous = on_ambiguous

    async def send(self, channel: Channel, msg: Outbound, chunk: Chunk, index: int) -> str:
        """The platform's id of the sent chunk. Raises the last ``TransientError`` (or
        ``Retryable``) once the attempts are spent, and ``PermanentError`` at once."""
        current = chunk
        ambiguous = False
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((TransientError, Retryable)),
            wait=_wait,
            stop=stop_after_attempt(self._max_attempts),
            reraise=True,
        ):
            with attempt:
                if ambiguous:
                    found = await channel.find_sent(msg, index)
                    if found is not None:
                        log.info("outbox: %s chunk %d of reply %s had arrived (%s); not re-sent",
                                 channel.name, index, msg.reply_id, found)
                        return found
                await self._limiter.acquire(channel.name, msg.chat_id, channel.limits)
                try:
                    try:
                        return await channel.send_chunk(msg, current, index)
                    except FormattingRejected:
                        current = Chunk(text=current.plain, plain=current.plain,
                                        formatted=False)
                        return await channel.send_chunk(msg, current, index)
                except MaybeSent as err:
                    await self._count_ambiguous(channel, msg, index, err, first=not ambiguous)
                    ambiguous = True
                    raise
                except (TransientError, PermanentError):
                    raise
                except Exception as err:
                    if refused_write(err):
                        # a channel over Redis (the local one) meets Redis refusing
                        # writes: the chat waits in place, in order
                        raise
                    log.exception("outbox: %s.send_chunk raised unexpectedly", channel.name)
                    raise Retryable(repr(err)) from err
        raise AssertionError("unreachable")

    async def _count_ambiguous(self, channel: Channel, msg: Outbound, index: int,
                               err: MaybeSent, *, first: bool) -> None:
        """Count an ambiguous send; log the chunk's first one (not every retry)."""
        self._on_ambiguous()
        if first:
            log.warning("outbox: %s chunk %d of reply %s may have been delivered (%s); "
                        "resolving before any re-send", channel.name, index, msg.reply_id, err)
        try:
            await self._outcomes.count_ambiguous(channel.name)
        except (redis.RedisError, OSError) as rerr:
            # a count is not worth failing the send over: the in-process count still has it
            log.debug("outbox: could not count an ambiguous send (%s)", rerr)

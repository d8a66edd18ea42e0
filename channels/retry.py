"""The one retry policy of the adapters: jittered exponential backoff with a cap,
tenacity's ``wait_random_exponential``.

``retrying(...)`` is a tenacity ``AsyncRetrying`` for a call retried until it works (or
``attempts`` run out). ``Backoff`` is the same policy for a loop that keeps running (a
poller): each ``await backoff.sleep()`` waits one step longer, ``reset()`` after a
success starts over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pydantic import BaseModel, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_never,
    wait_random_exponential,
)

log = logging.getLogger(__name__)


def backoff_wait(initial: float, maximum: float) -> wait_random_exponential:
    """Waits up to ``initial * 2**n`` seconds (random, full jitter), at most ``maximum``."""
    return wait_random_exponential(multiplier=initial, max=maximum)


def retrying(
    *,
    initial: float,
    maximum: float,
    retry_if: Callable[[BaseException], bool] = lambda exc: True,
    attempts: int | None = None,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> AsyncRetrying:
    """``async for attempt in retrying(...): with attempt: ...`` (re-raises the last
    error once ``attempts`` are used up; never gives up without ``attempts``).
    ``asyncio.CancelledError`` is never retried."""

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if on_retry is not None and exc is not None:
            on_retry(exc, state.upcoming_sleep)

    return AsyncRetrying(
        wait=backoff_wait(initial, maximum),
        retry=retry_if_exception(
            lambda exc: not isinstance(exc, asyncio.CancelledError) and retry_if(exc)),
        stop=stop_after_attempt(attempts) if attempts else stop_never,
        before_sleep=before_sleep,
        reraise=True,
    )


class Backoff:
    """The policy for a long-running loop: ``failures`` counts up until ``reset()``."""

    def __init__(self, initial: float, maximum: float) -> None:
        self._wait = backoff_wait(initial, maximum)
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        state = RetryCallState(retry_object=AsyncRetrying(), fn=None, args=(), kwargs={})
        state.attempt_number = self.failures
        return float(self._wait(state))

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())

    def reset(self) -> None:
        self.failures = 0


class BackoffSettings(BaseModel):
    """The config keys of a receive loop's ``Backoff``: after an error, jittered
    exponential from ``backoff_initial`` to ``backoff_max``, seconds."""

    backoff_initial: float = Field(default=1.0, gt=0)
    backoff_max: float = Field(default=60.0, gt=0)

    def backoff(self) -> Backoff:
        return Backoff(self.backoff_initial, self.backoff_max)

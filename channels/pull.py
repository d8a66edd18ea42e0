"""The one receive loop of the adapters that pull: Telegram's getUpdates, Matrix's
/sync, Signal's event stream and email's IMAP IDLE (and any later poller). The adapter
supplies ``fetch``; the loop owns the cursor, the sink, the backoff and stall detection.

Contract:

* ``fetch(cursor)`` pulls what came after ``cursor`` (None: the adapter's own start,
  nothing stored yet) and returns a ``Batch``: its items in order, each an ``Inbound``
  (or None for something to skip past, e.g. malformed) with the cursor after it if
  the platform numbers items one by one, and the cursor after the whole batch.
* Each ``Inbound`` is handed to the sink, in order. A cursor is committed (kept as
  ``cursor`` and written to the cursor store under ``key``) only after the sink
  returned for everything before it: nothing is lost.
* When the sink raises, the batch is held and the same item handed to the sink again
  after a backoff, until it is durable; the cursor does not move meanwhile, so a
  restart re-fetches it too (the inbox dedupes what was durable already).
* When ``fetch`` raises, the loop backs off and fetches again from the same cursor.
  ``RateLimited`` waits exactly what the platform asked; ``PermanentError`` (a
  refused token) stops the loop with one clear log line and ``fatal`` set.
* A fetch still running after ``stall_after`` seconds (a connection dropped without
  a word) is cancelled, counted in ``stalls``, and fetched again at once.
* The stored cursor is read once at start, retried with backoff until the store
  answers: without it the loop would replay or skip. A failed cursor write is logged
  and not retried: the items are durable, and a restart from the older cursor is
  deduped by the inbox.

All waits use the adapters' one policy (``channels.retry.Backoff``): failures count up
until a fetch or a sink call succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from channels.base import CursorStore, InboundSink
from channels.errors import PermanentError, RateLimited
from channels.models import Inbound
from channels.retry import Backoff


@dataclass(frozen=True)
class Item:
    """One pulled thing: ``inbound`` for the sink (None: skip it), and ``cursor``, the
    cursor after it when the platform has one per item (None: only the batch's)."""

    inbound: Inbound | None
    cursor: str | None = None


@dataclass(frozen=True)
class Batch:
    """What one ``fetch`` pulled, in order, and the cursor after all of it (None: the
    cursor stays where the items left it)."""

    items: Sequence[Item] = ()
    cursor: str | None = None


Fetch = Callable[[str | None], Awaitable[Batch]]


def raise_if_cancelling() -> None:
    """Raise ``CancelledError`` when the running task was asked to stop.

    Python 3.11's ``asyncio.wait_for`` (used inside client libraries, aioimaplib's
    commands among them) can swallow a cancel that lands as its inner future completes;
    the task then runs on with ``cancelling()`` set and would enter its next long wait
    (a long poll, IMAP IDLE) never to return. The loop checks before each fetch, and a
    fetch should check before it starts such a wait."""
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        raise asyncio.CancelledError


class PullLoop:
    """Runs ``fetch`` -> sink -> commit for one adapter account until cancelled (or a
    ``PermanentError``)."""

    def __init__(
        self,
        fetch: Fetch,
        sink: InboundSink,
        cursors: CursorStore | None,
        key: str,
        *,
        backoff: Backoff,
        stall_after: float | None,
        log: logging.Logger,
        name: str,
    ) -> None:
        self._fetch = fetch
        self._sink = sink
        self._cursors = cursors
        self._key = key
        self._backoff = backoff
        self._stall_after = stall_after
        self._log = log
        self._name = name
        #: the committed cursor: everything before it went through the sink
        self.cursor: str | None = None
        #: fetches cancelled for outliving ``stall_after``
        self.stalls = 0
        #: why the loop stopped for good (a ``PermanentError``'s reason); None while running
        self.fatal: str | None = None
        #: set once the first batch was handled and its cursor committed
        self.ready = asyncio.Event()
        #: the message handed to the sink and not yet durable (None between messages)
        self.held: Inbound | None = None

    @property
    def failures(self) -> int:
        """Consecutive failed fetches or sink calls; 0 after any success."""
        return self._backoff.failures

    def __repr__(self) -> str:
        return (f"PullLoop({self._name}, cursor={self.cursor!r}, failures={self.failures}, "
                f"stalls={self.stalls})")

    async def run(self) -> None:
        self.cursor = await self._load()
        while self.fatal is None:
            raise_if_cancelling()
            batch = await self._pull()
            if batch is None:
                continue
            for item in batch.items:
                if item.inbound is not None:
                    await self._deliver(item.inbound)
                if item.cursor is not None:
                    await self._commit(item.cursor)
            if batch.cursor is not None:
                await self._commit(batch.cursor)
            self.ready.set()

    async def _load(self) -> str | None:
        if self._cursors is None:
            return None
        while True:
            try:
                stored = await self._cursors.get(self._key)
            except Exception as error:
                self._log.warning("%s: cursor store unavailable (%s); retrying", self._name,
                                  type(error).__name__)
                await self._backoff.sleep()
                continue
            self._backoff.reset()
            return stored

    async def _pull(self) -> Batch | None:
        """One fetch; None after a handled failure (already waited)."""
        try:
            async with asyncio.timeout(self._stall_after) as window:
                batch = await self._fetch(self.cursor)
        except TimeoutError as error:
            if not window.expired():  # the client's own timeout, not the stall watchdog
                await self._failed(error)
                return None
            self.stalls += 1
            self._log.warning("%s: fetch stalled for %.0fs; fetching again", self._name,
                              self._stall_after or 0)
            return None
        except RateLimited as error:
            self._log.warning("%s: rate limited; waiting %.1fs as asked", self._name,
                              error.retry_after)
            await asyncio.sleep(error.retry_after)
            return None
        except PermanentError as error:
            self.fatal = error.reason
            self._log.error("%s: %s; receiving stopped", self._name, error)
            return None
        except Exception as error:
            await self._failed(error)
            return None
        self._backoff.reset()
        return batch

    async def _failed(self, error: Exception) -> None:
        # aiohttp can turn a cancel that races its own timeout into an error;
        # swallowing it would keep a stopped loop running
        raise_if_cancelling()
        # one line per outage, not one per attempt
        (self._log.debug if self._backoff.failures else self._log.warning)(
            "%s: fetch failed (%s); backing off", self._name, str(error) or type(error).__name__)
        await self._backoff.sleep()

    async def _deliver(self, inbound: Inbound) -> None:
        """Hand ``inbound`` to the sink until it returns (it made it durable)."""
        self.held = inbound
        while True:
            try:
                await self._sink(inbound)
            except Exception as error:
                retry = self._backoff.failures > 0
                (self._log.debug if retry else self._log.warning)(
                    "%s: inbox unavailable (%s); holding message %s and retrying",
                    self._name, type(error).__name__, inbound.message_id)
                await self._backoff.sleep()
                continue
            self._backoff.reset()
            self.held = None
            return

    async def _commit(self, cursor: str) -> None:
        self.cursor = cursor
        if self._cursors is None:
            return
        try:
            await self._cursors.set(self._key, cursor)
        except Exception as error:
            self._log.warning("%s: could not store the cursor (%s)", self._name,
                              type(error).__name__)

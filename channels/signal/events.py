"""The receiving loop: signal-cli's events stream (``GET /api/v1/events``), normalize,
sink, and only then move the stored cursor.

What signal-cli does (``HttpServerHandler.handleEventsEndpoint``): each message it
receives from the Signal server is written as ``event:receive`` + ``data:<json>`` to
every connected events client, with no event id; a ``:`` keep-alive comment goes out
every 15 s. It acknowledges the message to the Signal server itself, before and
regardless of us, and keeps no backlog: there is no ``Last-Event-ID`` to resume from.
So, promises:

* A message is passed to the sink and held (the stream is not read further, which
  backs signal-cli's writes up) until the sink returned; sink failures are retried
  with backoff. Only then is the cursor (``last``: its message id) stored.
* ``alive`` (the last time the stream was known to be open) is stored as it goes. When
  the stream breaks, or at start after a previous run, the adapter reconnects and, with
  ``receive_mode = "on-start"``, reports the window between the last sign of life and
  the reconnection as a gap (``SignalHealth.gap``): signal-cli may have received and
  dropped messages in it. With ``on-connection`` signal-cli only receives while a
  client listens, so a break leaves messages on the Signal server and is no gap.
* A silent dead connection is noticed after ``idle_timeout`` without a byte.
* Stopping while a message is held (the inbox down) loses it, and says so: signal-cli
  has acknowledged it already.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import aiohttp
from tenacity import AsyncRetrying

from channels.base import CursorStore, InboundSink
from channels.models import Inbound
from channels.retry import Backoff, retrying
from channels.signal.errors import UNTRUSTED_IDENTITY, Problem
from channels.signal.health import SignalHealth
from channels.signal.normalize import BotIdentity, normalize_event
from channels.signal.settings import SignalSettings
from channels.signal.sse import SseParser

log = logging.getLogger("channels.signal")

EVENTS_PATH = "/api/v1/events"
LAST_KEY = "last"
ALIVE_KEY = "alive"


class StreamRefused(Exception):
    """The daemon answered the events request with something other than a stream."""


def _now() -> datetime:
    return datetime.now(UTC)


def _reason(error: BaseException) -> str:
    if isinstance(error, asyncio.TimeoutError | aiohttp.SocketTimeoutError):
        return "no keep-alive within idle_timeout"
    if isinstance(error, aiohttp.ClientConnectorError):
        return "signal-cli unreachable"
    if isinstance(error, StreamRefused):
        return str(error)
    return f"connection closed ({type(error).__name__})"


class EventStream:
    """Reads one account's events stream until cancelled."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        settings: SignalSettings,
        bot: BotIdentity,
        sink: InboundSink,
        cursors: CursorStore | None,
        health: SignalHealth,
        *,
        account: str = "default",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._session = session
        self._settings = settings
        self._bot = bot
        self._sink = sink
        self._cursors = cursors
        self._health = health
        self._account = account
        self._headers = dict(headers or {})
        self.connected = asyncio.Event()
        #: reconnect backoff (``channels.retry``); reset once a stream is open again
        self._backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        #: last moment the stream was known open; None before the first connection
        self.alive_at: datetime | None = None
        self._saved_alive = 0.0
        self._held: Inbound | None = None

    @property
    def failures(self) -> int:
        """Consecutive failed connections since the stream was last open."""
        return self._backoff.failures

    def __repr__(self) -> str:
        return f"EventStream(connected={self.connected.is_set()}, failures={self.failures})"

    async def run(self) -> None:
        previous = await self._load_alive()
        lost_at, why = previous, "the gateway was not listening (restart)"
        try:
            while True:
                try:
                    await self._read(lost_at, why)
                    error: BaseException = ConnectionResetError("stream ended")
                except (aiohttp.ClientError, TimeoutError, OSError, ValueError,
                        StreamRefused) as caught:
                    error = caught
                reason = _reason(error)
                if self.connected.is_set():  # the gap starts at this break, for this reason
                    lost_at, why = self.alive_at, reason
                    self.connected.clear()
                self._health.stream_down(reason)
                await self._backoff.sleep()
        finally:
            if self._held is not None:
                log.error("signal (%s): message %s was never made durable and is lost "
                          "(signal-cli had acknowledged it already)",
                          self._account, self._held.message_id)
            if self.connected.is_set():  # open until now: a restart's gap starts here
                self.alive_at = _now()
            await self._save_alive(force=True)

    async def _read(self, lost_at: datetime | None, why: str) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._settings.request_timeout,
                                        sock_read=self._settings.idle_timeout)
        url = self._settings.url + EVENTS_PATH
        params = {"account": self._settings.number}  # multi-account mode: this account only
        async with self._session.get(url, params=params, headers=self._headers,
                                     timeout=timeout) as resp:
            kind = resp.headers.get("Content-Type", "")
            if resp.status != 200 or not kind.startswith("text/event-stream"):
                raise StreamRefused(f"signal-cli answered HTTP {resp.status} {kind}".strip())
            now = _now()
            if lost_at is not None and self._settings.receive_mode == "on-start":
                self._health.gap(lost_at, now, why)
            self.alive_at = now
            self._backoff.reset()
            self.connected.set()
            self._health.stream_up()
            await self._save_alive(force=True)
            parser = SseParser()
            async for chunk in resp.content.iter_any():
                self.alive_at = _now()
                for event in parser.feed(chunk):
                    if event.event == "receive":
                        await self._handle(event.data)
                await self._save_alive()

    async def _handle(self, data: str) -> None:
        try:
            event = json.loads(data)
            if not isinstance(event, dict):
                raise ValueError("not an object")
        except ValueError:
            log.warning("signal (%s): malformed event skipped", self._account)
            return
        if event.get("account") not in (None, self._settings.number):
            return  # another account of a multi-account daemon
        exception = event.get("exception")
        if isinstance(exception, dict) and exception.get("type") == "UntrustedIdentityException":
            self._health.report(Problem(
                UNTRUSTED_IDENTITY,
                "a message could not be read: its sender's safety number changed; verify "
                f"it, then run: signal-cli -a {self._settings.number} trust <sender>",
            ))
        try:
            inbound = normalize_event(event, self._bot, self._account)
        except (ValueError, TypeError, KeyError) as error:
            log.warning("signal (%s): event not understood, skipped (%s)", self._account, error)
            return
        if inbound is None:
            return
        await self._deliver(inbound)
        await self._set(LAST_KEY, inbound.message_id)

    async def _deliver(self, inbound: Inbound) -> None:
        """Sink it, retrying until it is durable: signal-cli will not send it again."""
        self._held = inbound
        retries = 0

        def note(error: BaseException, delay: float) -> None:
            nonlocal retries
            retries += 1
            (log.warning if retries == 1 else log.debug)(
                "signal (%s): inbox unavailable (%s); holding message %s and retrying",
                self._account, type(error).__name__, inbound.message_id)

        async for attempt in self._retrying(note):
            with attempt:
                await self._sink(inbound)
        self._held = None

    async def _load_alive(self) -> datetime | None:
        if self._cursors is None:
            return None
        def note(error: BaseException, delay: float) -> None:
            log.warning("signal (%s): cursor store unavailable (%s); retrying",
                        self._account, type(error).__name__)

        stored: str | None = None
        # without it a gap across the restart would go unreported: retried until it answers
        async for attempt in self._retrying(note):
            with attempt:
                stored = await self._cursors.get(ALIVE_KEY)
        try:
            return datetime.fromisoformat(stored) if stored else None
        except ValueError:
            log.warning("signal (%s): ignoring unreadable stored time %r", self._account, stored)
            return None

    async def _save_alive(self, *, force: bool = False) -> None:
        loop = asyncio.get_running_loop()
        every = min(10.0, self._settings.idle_timeout / 2)
        if self.alive_at is None or (not force and loop.time() - self._saved_alive < every):
            return
        self._saved_alive = loop.time()
        await self._set(ALIVE_KEY, self.alive_at.isoformat())

    async def _set(self, key: str, value: str) -> None:
        if self._cursors is None:
            return
        try:
            await self._cursors.set(key, value)
        except Exception as error:
            # the message is durable already; a lost cursor write only blurs a gap report
            log.warning("signal (%s): could not store %s (%s)", self._account, key,
                        type(error).__name__)

    def _retrying(self, on_retry: Callable[[BaseException, float], None]) -> AsyncRetrying:
        """Retry a call (any ``Exception``) until it works, on the adapters' one policy."""
        return retrying(initial=self._settings.backoff_initial,
                        maximum=self._settings.backoff_max,
                        retry_if=lambda error: isinstance(error, Exception), on_retry=on_retry)

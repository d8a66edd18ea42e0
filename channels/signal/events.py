"""The receiving loop: signal-cli's events stream (``GET /api/v1/events``), normalize,
sink, and only then move the stored cursor.

What signal-cli does (``HttpServerHandler.handleEventsEndpoint``): each message it
receives from the Signal server is written as ``event:receive`` + ``data:<json>`` to
every connected events client, with no event id; a ``:`` keep-alive comment goes out
every 15 s. It acknowledges the message to the Signal server itself, before and
regardless of us, and keeps no backlog: there is no ``Last-Event-ID`` to resume from.
So the stream is the fetch of the shared receive loop (``channels.pull``): each read
of the stream is a batch, each message carries its cursor (``last``: its message id).
Promises, beyond the loop's:

* A message is held by the loop (the stream is not read further, which backs
  signal-cli's writes up) until the sink returned; signal-cli will not send it again.
* ``alive`` (the last time the stream was known to be open) is stored as it goes. When
  the stream breaks, or at start after a previous run, the adapter reconnects and, with
  ``receive_mode = "on-start"``, reports the window between the last sign of life and
  the reconnection as a gap (``SignalHealth.gap``): signal-cli may have received and
  dropped messages in it. With ``on-connection`` signal-cli only receives while a
  client listens, so a break leaves messages on the Signal server and is no gap.
* A silent dead connection is the loop's stall: no byte (a keep-alive comes every 15 s)
  within ``idle_timeout``; the stream is then reopened.
* Stopping while a message is held (the inbox down) loses it, and says so: signal-cli
  has acknowledged it already.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime

import aiohttp

from channels.base import CursorStore, InboundSink
from channels.models import Inbound
from channels.pull import Batch, Item, PullLoop
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


def _reason(error: BaseException) -> str:
    if isinstance(error, asyncio.TimeoutError | aiohttp.SocketTimeoutError):
        return "no keep-alive within idle_timeout"
    if isinstance(error, aiohttp.ClientConnectorError):
        return "signal-cli unreachable"
    if isinstance(error, StreamRefused):
        return str(error)
    return f"connection closed ({type(error).__name__})"


class EventStream:
    """Reads one account's events stream until cancelled: the fetch of its receive loop."""

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
    ) -> None:
        self._session = session
        self._settings = settings
        self._bot = bot
        self._cursors = cursors
        self._health = health
        self._account = account
        self.connected = asyncio.Event()
        #: last moment the stream was known open; None before the first connection
        self.alive_at: datetime | None = None
        self._saved_alive = 0.0
        self._loaded = False
        #: where a gap would start and why (the previous run's last sign of life first)
        self._lost_at: datetime | None = None
        self._why = "the gateway was not listening (restart)"
        self._response: aiohttp.ClientResponse | None = None
        self._parser = SseParser()
        self.loop = PullLoop(
            self._fetch, sink, cursors, LAST_KEY,
            backoff=settings.backoff(),
            # signal-cli sends a keep-alive every 15 s: silence means a dead connection
            stall_after=settings.idle_timeout, log=log, name=f"signal ({account})",
        )

    def __repr__(self) -> str:
        return (f"EventStream(connected={self.connected.is_set()}, "
                f"failures={self.loop.failures})")

    async def run(self) -> None:
        try:
            await self.loop.run()
        finally:
            if self.loop.held is not None:
                log.error("signal (%s): message %s was never made durable and is lost "
                          "(signal-cli had acknowledged it already)",
                          self._account, self.loop.held.message_id)
            if self.connected.is_set():  # open until now: a restart's gap starts here
                self.alive_at = datetime.now(UTC)
            self._close()
            await self._save_alive(force=True)

    async def _fetch(self, cursor: str | None) -> Batch:
        """The messages of the next bytes of the stream (opened first if it is not)."""
        if not self._loaded:
            # without it a gap across the restart would go unreported: the loop retries
            self._lost_at = await self._load_alive()
            self._loaded = True
        if self._response is None and self.connected.is_set():
            self._broken(TimeoutError())  # the loop cancelled a silent read: a stall
        try:
            if self._response is None:
                await self._open()
            assert self._response is not None
            chunk = await self._response.content.readany()
            if not chunk:
                raise ConnectionResetError("stream ended")
            events = self._parser.feed(chunk)
        except asyncio.CancelledError:
            self._close()  # a stall or a stop; the next fetch (if any) reports it
            raise
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, StreamRefused) as error:
            self._broken(error)
            raise
        self.alive_at = datetime.now(UTC)
        inbounds = [self._inbound(event.data) for event in events if event.event == "receive"]
        await self._save_alive()
        return Batch([Item(inbound, inbound.message_id) for inbound in inbounds if inbound])

    async def _open(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._settings.request_timeout)
        url = self._settings.url + EVENTS_PATH
        params = {"account": self._settings.number}  # multi-account mode: this account only
        resp = await self._session.get(url, params=params, timeout=timeout)
        kind = resp.headers.get("Content-Type", "")
        if resp.status != 200 or not kind.startswith("text/event-stream"):
            resp.release()
            raise StreamRefused(f"signal-cli answered HTTP {resp.status} {kind}".strip())
        self._response, self._parser = resp, SseParser()
        now = datetime.now(UTC)
        if self._lost_at is not None and self._settings.receive_mode == "on-start":
            self._health.gap(self._lost_at, now, self._why)
        self.alive_at = now
        self.connected.set()
        self._health.stream_up()
        await self._save_alive(force=True)

    def _broken(self, error: BaseException) -> None:
        reason = _reason(error)
        if self.connected.is_set():  # the gap starts at this break, for this reason
            self._lost_at, self._why = self.alive_at, reason
            self.connected.clear()
        self._health.stream_down(reason)
        self._close()

    def _close(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None

    def _inbound(self, data: str) -> Inbound | None:
        try:
            event = json.loads(data)
            if not isinstance(event, dict):
                raise ValueError("not an object")
        except ValueError:
            log.warning("signal (%s): malformed event skipped", self._account)
            return None
        if event.get("account") not in (None, self._settings.number):
            return None  # another account of a multi-account daemon
        exception = event.get("exception")
        if isinstance(exception, dict) and exception.get("type") == "UntrustedIdentityException":
            self._health.report(Problem(
                UNTRUSTED_IDENTITY,
                "a message could not be read: its sender's safety number changed; verify "
                f"it, then run: signal-cli -a {self._settings.number} trust <sender>",
            ))
        try:
            return normalize_event(event, self._bot, self._account)
        except (ValueError, TypeError, KeyError) as error:
            log.warning("signal (%s): event not understood, skipped (%s)", self._account, error)
            return None

    async def _load_alive(self) -> datetime | None:
        if self._cursors is None:
            return None
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
        if self._cursors is None:
            return
        try:
            await self._cursors.set(ALIVE_KEY, self.alive_at.isoformat())
        except Exception as error:
            # the message is durable already; a lost write only blurs a gap report
            log.warning("signal (%s): could not store %s (%s)", self._account, ALIVE_KEY,
                        type(error).__name__)

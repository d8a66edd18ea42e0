"""The outbox: sends what workers published, once per chunk, in order per chat.

Workers ``XADD`` events to the ``outbox`` stream: ``typing`` (turn started), ``reply``
(an ``Outbound``) and ``done`` (the turn finished), built and read by
``gateway/queue/events.py``. Gateways read it through one
consumer group. An entry is acked (and deleted) only after it was handled, so a
gateway that dies mid-send finds it again on restart (its own pending entries) or
another gateway claims it (``XAUTOCLAIM`` after ``claim_idle``).

Each chunk is sent once: ``sent:{reply_id}:{i}`` is set after the platform accepted
it (together with the chunk's delivery outcome, gateway/outgoing/_delivery.py) and checked
before sending. (A crash between the platform's answer and that SET
re-sends that one chunk, except where the platform dedupes a re-send itself: Matrix by
its transaction id, Discord by its nonce (for a few minutes), the local channel by its
own per-chunk mark. The others offer no idempotency key to close that gap.)
A Redis that answers but refuses writes (a full disk: ``MISCONF``; ``maxmemory``:
``OOM``) does not re-send anything: a chunk the platform accepted whose record could not
be written is kept as sent in memory (``unrecorded``) and recorded once Redis takes it
again, so while this gateway runs it is never sent twice (a crash in that window falls
under the rule above). A chat's sender waits in place while Redis refuses writes, so
its later replies never overtake one that waits.
A transient failure that may have reached the platform (``MaybeSent``: read timeout,
connection dropped after the request was written, a 5xx after the body) is ambiguous:
counted (``stats.ambiguous`` and ``{channel}:ambiguous`` in the delivery counts),
logged once per chunk with the reply id, and resolved by the channel before the
retry: ``Channel.find_sent`` returns the chunk's id where the platform lets us look it
up (Slack), the adapter's idempotency key dedupes the re-send (Discord's nonce,
Matrix's transaction id), else the chunk is sent again (Telegram, Signal: at least once
rather than lost).
Each chunk is sent with the retry policy of gateway/outgoing/_chunksend.py; a ``PermanentError``
is recorded as the chunk's outcome (failed, with its reason), logged once, and the chunk
is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

from channels.base import Channel, DeliveryReport
from channels.errors import PermanentError, TransientError
from channels.models import Outbound
from gateway import wait_any
from gateway.config.env import GATEWAY_NAME_ENV
from gateway.intake._groupfiles import GroupFiles
from gateway.outgoing._chunksend import ChunkSender, Retryable
from gateway.outgoing._delivery import DeliveryRecorder, chunk_report
from gateway.outgoing._filesend import FileSender
from gateway.outgoing._ratelimit import RateLimiter
from gateway.queue import (
    OUTBOX_GROUP,
    GatewayQueue,
    Keys,
    MalformedEvent,
    OutboxEvent,
    as_str,
    events,
    read_event,
    refused_write,
)

log = logging.getLogger(__name__)

#: most entries acked in one call (Lua's unpack has a stack limit)
ACK_BATCH = 500
#: longest a chat's sender waits for Redis to come back before moving on, seconds
REDIS_WAIT = 60.0

@dataclass
class OutboxStats:
    sent: int = 0
    skipped: int = 0
    failed: int = 0
    #: sends that failed after they may have reached the platform (``MaybeSent``)
    ambiguous: int = 0
    handled: int = 0


class Outbox:
    """Consumes the outbox stream and drives ``Channel.render``/``send_chunk``."""

    def __init__(
        self,
        client: aioredis.Redis,
        channels: Mapping[tuple[str, str], Channel],
        keys: Keys | None = None,
        *,
        consumer: str | None = None,
        block_ms: int = 1000,
        claim_idle_ms: int = 60_000,
        max_attempts: int = 8,
        files: GroupFiles | None = None,
    ) -> None:
        self._r = client
        self._channels = dict(channels)
        self._keys = keys or Keys()
        # stable across restarts of the same gateway, so its pending entries come back
        self.consumer = consumer or os.environ.get(GATEWAY_NAME_ENV) or socket.gethostname()
        self._block_ms = block_ms
        self._claim_idle_ms = claim_idle_ms
        self._queues: dict[tuple[str, str, str], asyncio.Queue[tuple[str, OutboxEvent]]] = {}
        self._tasks: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._inflight: set[str] = set()
        self._to_ack: list[str] = []
        self._ack_task: asyncio.Task[None] | None = None
        self._q = GatewayQueue(client, self._keys)
        self._warned: set[str] = set()
        self.stats = OutboxStats()
        #: every chunk's outcome, recorded in Redis (also the adapters' ``OutcomeSink``)
        self.outcomes = DeliveryRecorder(client, self._keys)
        self._sender = ChunkSender(RateLimiter(client, self._keys), self.outcomes, max_attempts,
                                   on_ambiguous=self._note_ambiguous)
        #: (reply id, chunk index) -> outcome of a chunk sent whose record Redis refused
        self.unrecorded: dict[tuple[str, int], DeliveryReport] = {}
        self._record_task: asyncio.Task[None] | None = None
        self.files = FileSender(client, self._keys, files, self.outcomes, self.deliver)
        #: why Redis refuses writes, while it does (logged once per cause)
        self.refusing: str | None = None

    def _note_ambiguous(self) -> None:
        self.stats.ambiguous += 1

    async def ensure_group(self) -> None:
        try:
            # "0": a fresh group also delivers what was published before any gateway ran
            await self._r.xgroup_create(self._keys.outbox, OUTBOX_GROUP, id="0", mkstream=True)
        except redis.ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; then let the per-chat senders finish. Every
        Redis call is inside the retry loop: a gateway started while Redis refuses
        writes (``ensure_group``) keeps trying instead of ending the task."""
        ready = False
        last_claim = 0.0
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                if not ready:
                    await self.ensure_group()
                    await self._read(pending=True)
                    ready = True
                await self._read(pending=False)
                if loop.time() - last_claim > self._claim_idle_ms / 2000:
                    last_claim = loop.time()
                    await self._claim()
                self._refusal(None)
                continue
            except (redis.ConnectionError, redis.TimeoutError, OSError) as err:
                log.warning("outbox: Redis unavailable (%s); retrying", err)
            except redis.ResponseError as err:
                if refused_write(err):
                    self._refusal(err)
                elif "NOGROUP" not in str(err):
                    log.exception("outbox: unexpected Redis error; retrying")
                else:  # the stream or its group vanished (a flushed Redis): recreate
                    with contextlib.suppress(redis.RedisError, OSError):
                        await self.ensure_group()
            except Exception:
                # a dead consumer would silently stop every reply: log and keep going
                log.exception("outbox: unexpected error; retrying")
            await wait_any(1.0, stop)
        await self.drain()

    def _refusal(self, err: BaseException | None) -> None:
        """Log a change of Redis' write refusal once, not once a second."""
        cause = None if err is None else refused_write(err)
        if cause == self.refusing:
            return
        if cause is not None:
            log.error("outbox: Redis refuses writes (%s); replies wait and go out in order "
                      "once it takes writes again", cause)
        elif self.unrecorded or self.refusing is not None:
            log.warning("outbox: Redis takes writes again")
        self.refusing = cause

    async def drain(self) -> None:
        """Wait for queued events to be handled."""
        for q in list(self._queues.values()):
            await q.join()
        if self._ack_task is not None:
            await self._ack_task
        if self.unrecorded:  # one last try; what is left is lost with this process
            await self._record_pending()

    async def _read(self, *, pending: bool) -> None:
        """Read new entries, or (``pending``) this consumer's unacked ones from before."""
        start = "0"
        while True:
            resp: Any = await self._r.xreadgroup(
                OUTBOX_GROUP, self.consumer, {self._keys.outbox: start if pending else ">"},
                count=200, block=None if pending else self._block_ms,
            )
            entries = resp[0][1] if resp else []
            for entry_id, fields in entries:
                self._dispatch(as_str(entry_id), fields)
            if not pending or not entries:
                return
            start = as_str(entries[-1][0])

    async def _claim(self) -> None:
        """Take over entries another (dead) gateway left unacked for too long."""
        start = "0-0"
        while True:
            resp: Any = await self._r.xautoclaim(self._keys.outbox, OUTBOX_GROUP, self.consumer,
                                            min_idle_time=self._claim_idle_ms, start_id=start,
                                            count=100)
            nxt, entries = as_str(resp[0]), resp[1]
            for entry_id, fields in entries:
                if fields:  # a deleted entry comes back as None
                    self._dispatch(as_str(entry_id), fields)
            if nxt == "0-0" or not entries:
                return
            start = nxt

    def _dispatch(self, entry_id: str, fields: Mapping[Any, Any]) -> None:
        if entry_id in self._inflight:
            return
        try:
            event = read_event(fields)
        except MalformedEvent as err:
            log.error("outbox: malformed entry %s dropped (%s)", entry_id, err)
            self._inflight.add(entry_id)
            self._ack_soon([entry_id])
            return
        self._inflight.add(entry_id)
        key = event.chat
        q = self._queues.get(key)
        if q is None:
            q = asyncio.Queue()
            self._queues[key] = q
            self._tasks[key] = asyncio.get_running_loop().create_task(self._chat_worker(key, q))
        q.put_nowait((entry_id, event))

    async def _chat_worker(
        self, key: tuple[str, str, str], q: asyncio.Queue[tuple[str, OutboxEvent]]
    ) -> None:
        """Handles one chat's events in stream order; exits when idle. Acks what it
        handled once its queue is empty (a turn's reply and "done": one ack)."""
        handled: list[str] = []
        try:
            while True:
                try:
                    entry_id, event = await asyncio.wait_for(q.get(), timeout=30)
                except TimeoutError:
                    if q.empty():
                        return
                    continue
                try:
                    done = await self._handle_in_order(event)
                except Exception:
                    log.exception("outbox: handling %s failed", entry_id)
                    done = False
                if done:
                    handled.append(entry_id)
                else:
                    # stays pending: reclaimed and retried after claim_idle
                    self._inflight.discard(entry_id)
                if handled and (q.empty() or len(handled) >= ACK_BATCH):
                    self._ack_soon(handled)  # before task_done: drain waits for it
                    handled = []
                q.task_done()
        finally:
            self._queues.pop(key, None)
            self._tasks.pop(key, None)

    async def _handle_in_order(self, event: OutboxEvent) -> bool:
        """``handle``, retrying in place through a Redis outage (the embedded server
        restarting): leaving the event to be reclaimed later would let the chat's next
        replies overtake it. Bounded by ``REDIS_WAIT``; then it is left pending and
        reclaimed as before. A Redis that refuses writes (full disk, ``maxmemory``) is
        waited for with no bound: it is alive and resumes by itself, and the chat's order
        must hold across the recovery. (A platform's exhausted transient retries still
        leave it pending at once.)"""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REDIS_WAIT
        delay = 0.2
        while True:
            try:
                return await self.handle(event)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                if loop.time() + delay > deadline:
                    raise
            except redis.ResponseError as err:
                if not refused_write(err):
                    raise
                self._refusal(err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _ack_soon(self, entry_ids: list[str]) -> None:
        """Ack (and delete) handled entries soon (in the background: the chat's next
        event need not wait a round trip), with any others handled meanwhile."""
        self._to_ack.extend(entry_ids)
        if self._ack_task is None or self._ack_task.done():
            self._ack_task = asyncio.get_running_loop().create_task(self._flush_acks())

    async def _flush_acks(self) -> None:
        while self._to_ack:
            ids, self._to_ack = self._to_ack[:ACK_BATCH], self._to_ack[ACK_BATCH:]
            try:
                await self._q.outbox_ack(ids)
                self.stats.handled += len(ids)
            except (redis.RedisError, OSError) as err:
                # they stay pending: claimed again after claim_idle (sent chunks are skipped)
                log.warning("outbox: could not ack %d entries (%s)", len(ids), err)
            finally:
                self._inflight.difference_update(ids)

    def _channel(self, name: str, account: str) -> Channel | None:
        ch = self._channels.get((name, account))
        if ch is None and f"{name}:{account}" not in self._warned:
            self._warned.add(f"{name}:{account}")
            log.error("outbox: no channel %s (account %s) configured; its replies are dropped",
                      name, account)
        return ch

    async def handle(self, event: OutboxEvent | Mapping[str, str]) -> bool:
        """Handle one event (or an entry's fields). True: done with it (ack); False:
        retry later."""
        if not isinstance(event, OutboxEvent):
            event = read_event(event)
        kind, data = event.kind, event.payload()
        if kind == events.REPLY:
            msg = Outbound.model_validate(data)
            ch = self._channel(msg.channel, msg.account)
            return True if ch is None else await self.deliver(ch, msg)
        ch = self._channel(str(data["channel"]), str(data.get("account", "default")))
        if ch is None:
            return True
        if kind == events.FILE:  # send_file (gateway/outgoing/_filesend.py)
            return await self.files.deliver(ch, data)
        try:
            if kind == events.TYPING:
                await asyncio.wait_for(ch.typing(str(data["chat_id"]), data.get("thread_id")), 10)
            elif kind == events.DONE:
                await ch.turn_done(str(data["chat_id"]), data.get("thread_id"),
                                   [str(i) for i in data.get("message_ids", [])],
                                   data.get("reply_id"))
            else:
                log.warning("outbox: unknown event type %r dropped", kind)
        except Exception as err:
            # a typing indicator or a completion notice is not worth a retry
            log.debug("outbox: %s event for %s failed: %s", kind, ch.name, err)
        return True

    async def deliver(self, channel: Channel, msg: Outbound) -> bool:
        """Send every chunk of ``msg`` not yet sent. False if a chunk must be retried
        later (transient failures exhausted)."""
        chunks = channel.render(msg.text)
        for index, chunk in enumerate(chunks):
            sent_key = self._keys.sent(msg.reply_id, index)
            if (msg.reply_id, index) in self.unrecorded or await self._r.exists(sent_key):
                self.stats.skipped += 1
                continue
            try:
                platform_id = await self._sender.send(channel, msg, chunk, index)
            except PermanentError as err:
                # logged by the recorder; the sent mark is set with the outcome
                await self._record(chunk_report(msg, index, False, err.reason))
                continue
            except (TransientError, Retryable) as err:
                log.warning("outbox: %s chunk %d of reply %s still failing (%s); will retry",
                            channel.name, index, msg.reply_id, err)
                self.stats.failed += 1
                return False
            await self._record(chunk_report(msg, index, True, platform_id or "sent"))
            self.stats.sent += 1
        return True

    async def _record(self, report: DeliveryReport) -> None:
        """Record a chunk's outcome with its sent mark. The chunk went out (or failed
        for good): if Redis cannot take the record now, the fact is kept here and
        recorded later, and this chunk is never sent again meanwhile."""
        try:
            await self.outcomes.record(report, mark_sent=True)
            return
        except (redis.RedisError, OSError) as err:
            log.warning("outbox: could not record chunk %d of reply %s (%s); kept as sent "
                        "in memory until Redis takes it", report.index, report.reply_id,
                        " ".join(str(err).split())[:200])
        self.unrecorded[(report.reply_id, report.index)] = report
        if self._record_task is None or self._record_task.done():
            self._record_task = asyncio.get_running_loop().create_task(self._record_later())

    async def _record_later(self) -> None:
        delay = 0.5
        while self.unrecorded:
            await asyncio.sleep(delay)
            await self._record_pending()
            delay = min(delay * 2, 5.0)

    async def _record_pending(self) -> None:
        for key, report in list(self.unrecorded.items()):
            try:
                await self.outcomes.record(report, mark_sent=True)
            except (redis.RedisError, OSError):
                return  # still refused: try again later, in order
            self.unrecorded.pop(key, None)

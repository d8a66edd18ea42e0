"""Outbox against a real Valkey with a scripted fake channel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from channels.base import Channel, ChannelLimits, Chunk, InboundSink
from channels.errors import (
    FormattingRejected,
    MaybeSent,
    NetworkError,
    PermanentError,
    RateLimited,
)
from channels.models import Outbound
from channels.split import split_text
from gateway.outgoing import Outbox, RateLimiter
from gateway.queue import OUTBOX_GROUP, GatewayQueue, Keys
from tests.pipeline.conftest import Valkey

K = Keys()


class FakeChannel(Channel):
    """Records sends; raises the scripted exceptions first (None = succeed)."""

    name = "fake"

    def __init__(self, *script: BaseException | None, interval: float = 0.0) -> None:
        self.limits = ChannelLimits(max_message_len=10, per_chat_interval=interval, burst=1)
        self.script = list(script)
        self.sent: list[tuple[str, int, str, bool]] = []
        self.calls = 0
        self.typing_calls: list[str] = []
        self.done_calls: list[list[str]] = []

    async def start(self, sink: InboundSink) -> None: ...

    async def stop(self) -> None: ...

    def render(self, text: str) -> list[Chunk]:
        return [Chunk(text=f"*{c}*", plain=c) for c in split_text(text, 10)]

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        self.calls += 1
        if self.script:
            exc = self.script.pop(0)
            if exc is not None:
                raise exc
        self.sent.append((message.reply_id, index, chunk.plain, chunk.formatted))
        return f"p{len(self.sent)}"

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        self.typing_calls.append(chat_id)

    async def turn_done(self, chat_id: str, thread_id: str | None, message_ids: list[str],
                        reply_id: str | None) -> None:
        self.done_calls.append(message_ids)


def reply_event(text: str, reply_id: str = "turn-1", chat: str = "c1") -> dict[str, str]:
    out = Outbound(channel="fake", chat_id=chat, text=text, reply_id=reply_id)
    return {"type": "reply", "data": out.model_dump_json()}


@pytest.fixture
async def r(valkey: Valkey) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(valkey.url)
    yield client
    await client.aclose()


def outbox(r: aioredis.Redis, ch: FakeChannel, **kw: Any) -> Outbox:
    return Outbox(r, {("fake", "default"): ch}, K, consumer=kw.pop("consumer", "gw-a"),
                  block_ms=100, **kw)


async def test_each_chunk_is_sent_once_even_when_redelivered(r: aioredis.Redis) -> None:
    ch = FakeChannel()
    ob = outbox(r, ch)
    text = "first para\n\nsecond one"
    event = reply_event(text)
    assert await ob.handle(event) is True
    n = len(ch.render(text))
    assert n > 1
    assert [i for _, i, _, _ in ch.sent] == list(range(n))
    assert "".join(t for _, _, t, _ in ch.sent) == text
    assert await ob.handle(event) is True  # e.g. the gateway crashed before XACK
    assert len(ch.sent) == n
    assert await r.get(K.sent("turn-1", 0)) == b"p1"
    assert ob.stats.skipped == n


async def test_rate_limited_waits_and_retries(r: aioredis.Redis) -> None:
    ch = FakeChannel(RateLimited(0.05), None)
    ob = outbox(r, ch)
    assert await ob.handle(reply_event("hi")) is True
    assert ch.calls == 2 and len(ch.sent) == 1


async def test_transient_errors_are_retried(r: aioredis.Redis) -> None:
    ch = FakeChannel(NetworkError("boom"), NetworkError("boom"), None)
    ob = outbox(r, ch, max_attempts=5)
    assert await ob.handle(reply_event("hi")) is True
    assert ch.calls == 3 and len(ch.sent) == 1


async def test_a_safe_transient_failure_is_not_counted_ambiguous(r: aioredis.Redis) -> None:
    ch = FakeChannel(NetworkError("connect refused"), None)
    ob = outbox(r, ch)
    assert await ob.handle(reply_event("hi")) is True
    assert len(ch.sent) == 1 and ob.stats.ambiguous == 0
    assert "fake:ambiguous" not in await ob.outcomes.counts()


async def test_an_ambiguous_send_is_counted_logged_once_and_resent(
    r: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # a platform with no lookup and no idempotency key: at least once, counted
    ch = FakeChannel(MaybeSent("read timeout"), MaybeSent("read timeout"), None)
    ob = outbox(r, ch, max_attempts=5)
    with caplog.at_level(logging.WARNING, logger="gateway.outgoing._outbox"):
        assert await ob.handle(reply_event("hi", reply_id="amb-1")) is True
    assert ch.calls == 3 and len(ch.sent) == 1
    assert ob.stats.ambiguous == 2
    assert (await ob.outcomes.counts())["fake:ambiguous"] == 2
    logged = [rec.getMessage() for rec in caplog.records if "may have been" in rec.getMessage()]
    assert len(logged) == 1 and "amb-1" in logged[0]


class LookupChannel(FakeChannel):
    """A platform whose history shows a chunk that arrived although the send failed."""

    def __init__(self, *script: BaseException | None) -> None:
        super().__init__(*script)
        self.arrived: dict[tuple[str, int], str] = {}
        self.lookups = 0

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        if self.script and isinstance(self.script[0], MaybeSent):
            self.arrived[(message.reply_id, index)] = "landed-1"  # reached, answer lost
        return await super().send_chunk(message, chunk, index)

    async def find_sent(self, message: Outbound, index: int) -> str | None:
        self.lookups += 1
        return self.arrived.get((message.reply_id, index))


async def test_an_ambiguous_send_found_by_lookup_is_not_resent(r: aioredis.Redis) -> None:
    ch = LookupChannel(MaybeSent("connection dropped"))
    ob = outbox(r, ch)
    assert await ob.handle(reply_event("hi", reply_id="amb-2")) is True
    assert ch.calls == 1 and ch.sent == [] and ch.lookups == 1
    assert ob.stats.ambiguous == 1
    assert await ob.outcomes.outcome("amb-2") == {0: ("delivered", "landed-1")}


async def test_unexpected_adapter_exception_is_retried(r: aioredis.Redis) -> None:
    ch = FakeChannel(KeyError("bug"), None)
    ob = outbox(r, ch)
    assert await ob.handle(reply_event("hi")) is True
    assert len(ch.sent) == 1


async def test_formatting_rejected_falls_back_to_plain(r: aioredis.Redis) -> None:
    ch = FakeChannel(FormattingRejected("bad entity"), None)
    ob = outbox(r, ch)
    assert await ob.handle(reply_event("hi")) is True
    assert ch.sent == [("turn-1", 0, "hi", False)]


async def test_permanent_error_is_logged_once_and_dropped(
    r: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ch = FakeChannel(PermanentError("bot_blocked", "Forbidden: bot was blocked by the user"))
    ob = outbox(r, ch)
    with caplog.at_level(logging.ERROR, logger="gateway.outgoing._outbox"):
        assert await ob.handle(reply_event("hi")) is True
        assert await ob.handle(reply_event("hi")) is True  # redelivered: not tried again
    errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(errors) == 1 and "bot_blocked" in errors[0].getMessage()
    assert ch.calls == 1 and ch.sent == []
    assert await r.get(K.sent("turn-1", 0)) == b"dropped"


async def test_exhausted_transient_stays_pending_and_a_restarted_gateway_sends_it(
    r: aioredis.Redis,
) -> None:
    await r.xadd(K.outbox, reply_event("hello"))
    failing = FakeChannel(NetworkError("down"), NetworkError("down"))
    ob1 = outbox(r, failing, max_attempts=2)
    stop = asyncio.Event()
    task = asyncio.create_task(ob1.run(stop))
    for _ in range(200):
        if failing.calls >= 2 and ob1.stats.failed:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await task
    assert failing.sent == []
    pending: Any = await r.xpending(K.outbox, OUTBOX_GROUP)
    assert pending["pending"] == 1
    # the same gateway comes back: its own pending entry is delivered first
    healthy = FakeChannel()
    ob2 = outbox(r, healthy)
    stop2 = asyncio.Event()
    task2 = asyncio.create_task(ob2.run(stop2))
    for _ in range(200):
        if healthy.sent:
            break
        await asyncio.sleep(0.05)
    stop2.set()
    await task2
    assert [t for _, _, t, _ in healthy.sent] == ["hello"]
    pending = await r.xpending(K.outbox, OUTBOX_GROUP)
    assert pending["pending"] == 0
    assert await r.xlen(K.outbox) == 0


async def test_another_gateway_claims_entries_a_dead_one_left(r: aioredis.Redis) -> None:
    await r.xadd(K.outbox, reply_event("orphan", reply_id="turn-9"))
    dead = outbox(r, FakeChannel(), consumer="gw-dead")
    await dead.ensure_group()
    # gw-dead reads the entry and dies before handling it
    await r.xreadgroup(OUTBOX_GROUP, "gw-dead", {K.outbox: ">"}, count=10)
    ch = FakeChannel()
    other = outbox(r, ch, consumer="gw-b", claim_idle_ms=50)
    await asyncio.sleep(0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(other.run(stop))
    for _ in range(200):
        if ch.sent:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await task
    assert [t for _, _, t, _ in ch.sent] == ["orphan"]


async def test_typing_and_done_events_reach_the_channel(r: aioredis.Redis) -> None:
    ch = FakeChannel()
    ob = outbox(r, ch)
    data = {"channel": "fake", "account": "default", "chat_id": "c1", "thread_id": None}
    assert await ob.handle({"type": "typing", "data": json.dumps(data)})
    assert await ob.handle({"type": "done", "data": json.dumps(
        {**data, "message_ids": ["m1", "m2"], "reply_id": None})})
    assert ch.typing_calls == ["c1"] and ch.done_calls == [["m1", "m2"]]


async def test_reply_for_unconfigured_channel_is_dropped_not_stuck(r: aioredis.Redis) -> None:
    ob = Outbox(r, {}, K, consumer="gw")
    assert await ob.handle(reply_event("hi")) is True


async def test_rate_limit_is_shared_across_limiters(r: aioredis.Redis, valkey: Valkey) -> None:
    other = aioredis.Redis.from_url(valkey.url)  # a second process, as far as Redis can tell
    try:
        b = RateLimiter(other, K)
        limits = ChannelLimits(max_message_len=10, per_chat_interval=60.0, burst=2)
        qa, qb = GatewayQueue(r, K), GatewayQueue(other, K)  # the limiters' gcra.lua
        assert await qa.rate_wait_ms("fake", "c1", 60_000, 2) == 0
        assert await qb.rate_wait_ms("fake", "c1", 60_000, 2) == 0  # the burst
        wait = await qa.rate_wait_ms("fake", "c1", 60_000, 2)
        assert 0 < wait <= 60_000  # the third send in a minute must wait, whoever sends it
        assert await b.acquire("fake", "other-chat", limits) == 0.0  # chats are separate
    finally:
        await other.aclose()


async def test_chat_order_is_kept(r: aioredis.Redis) -> None:
    ch = FakeChannel()
    ob = outbox(r, ch)
    for i in range(5):
        await r.xadd(K.outbox, reply_event(f"m{i}", reply_id=f"t{i}"))
    stop = asyncio.Event()
    task = asyncio.create_task(ob.run(stop))
    for _ in range(200):
        if len(ch.sent) == 5:
            break
        await asyncio.sleep(0.05)
    stop.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert [t for _, _, t, _ in ch.sent] == [f"m{i}" for i in range(5)]


async def test_outbox_survives_a_flushed_redis(r: aioredis.Redis) -> None:
    ch = FakeChannel()
    ob = outbox(r, ch)
    stop = asyncio.Event()
    task = asyncio.create_task(ob.run(stop))
    await r.xadd(K.outbox, reply_event("before", reply_id="t-a"))
    for _ in range(200):
        if ch.sent:
            break
        await asyncio.sleep(0.05)
    await r.flushall()  # the stream and its consumer group are gone
    await asyncio.sleep(0.3)
    await r.xadd(K.outbox, reply_event("after", reply_id="t-b"))
    for _ in range(200):
        if len(ch.sent) == 2:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await task
    assert [t for _, _, t, _ in ch.sent] == ["before", "after"]


async def test_a_chats_events_read_together_are_acked_together(r: aioredis.Redis) -> None:
    """A turn's reply and its "done" arrive in one read: one XACK (and one XDEL) for
    both once the chat's queue is empty, and nothing is left pending."""
    ch = FakeChannel()
    ob = outbox(r, ch)
    await ob.ensure_group()
    await r.xadd(K.outbox, reply_event("hi"))
    data = {"channel": "fake", "account": "default", "chat_id": "c1", "thread_id": None,
            "message_ids": ["m1"], "reply_id": "turn-1"}
    await r.xadd(K.outbox, {"type": "done", "data": json.dumps(data)})
    before: dict[str, Any] = await r.info("commandstats")
    stop = asyncio.Event()
    task = asyncio.create_task(ob.run(stop))
    for _ in range(200):
        if ob.stats.handled == 2:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await task
    after: dict[str, Any] = await r.info("commandstats")
    assert ch.done_calls == [["m1"]] and [t for _, _, t, _ in ch.sent] == ["hi"]
    assert int(after["cmdstat_xack"]["calls"]) - int(
        before.get("cmdstat_xack", {"calls": 0})["calls"]) == 1
    assert await r.xlen(K.outbox) == 0
    assert (await r.xpending(K.outbox, OUTBOX_GROUP))["pending"] == 0

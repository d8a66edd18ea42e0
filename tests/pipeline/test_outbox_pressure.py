"""The outbox while Redis refuses writes (``maxmemory`` with ``noeviction``: ``-OOM``),
against a real Valkey: nothing sent twice, the consumer never dies, nothing lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
import redis
import redis.asyncio as aioredis

from channels.models import Outbound
from gateway.outgoing import Outbox
from gateway.queue import OUTBOX_GROUP, Keys
from tests.pipeline.conftest import Valkey
from tests.pipeline.test_outbox import FakeChannel, reply_event

K = Keys()


@pytest.fixture
async def r(valkey: Valkey) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(valkey.url)
    yield client
    await client.config_set("maxmemory", 0)
    await client.aclose()


async def refuse_writes(r: aioredis.Redis) -> None:
    """Redis' memory is full: every write that allocates is refused with -OOM."""
    await r.config_set("maxmemory-policy", "noeviction")
    await r.config_set("maxmemory", 1)


async def accept_writes(r: aioredis.Redis) -> None:
    await r.config_set("maxmemory", 0)


async def until(predicate: Callable[[], object], what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


class FillingChannel(FakeChannel):
    """Redis' memory fills while the platform takes the chunk: the send succeeds, the
    delivery record that follows it is refused."""

    def __init__(self, r: aioredis.Redis) -> None:
        super().__init__()
        self.r = r

    async def send_chunk(self, message: Outbound, chunk: object, index: int) -> str:
        out = await super().send_chunk(message, chunk, index)  # type: ignore[arg-type]
        await refuse_writes(self.r)
        return out


async def test_a_sent_chunk_whose_record_is_refused_is_never_sent_again(
        r: aioredis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    ch = FillingChannel(r)
    ob = Outbox(r, {("fake", "default"): ch}, K, consumer="gw-a", block_ms=100,
                claim_idle_ms=200)
    event = reply_event("hello")
    await r.xadd(K.outbox, event)
    stop = asyncio.Event()
    task = asyncio.create_task(ob.run(stop))
    try:
        await until(lambda: any("record" in m or "failed" in m for m in caplog.messages),
                    "the refused record")
        assert len(ch.sent) == 1
        # what a reclaim of the still-pending entry does: it must not send again
        with contextlib.suppress(redis.RedisError):
            await ob.handle(event)
        assert len(ch.sent) == 1
        assert not await r.exists(K.sent("turn-1", 0))  # Redis has no record yet
        await accept_writes(r)
        await until(lambda: not ob.unrecorded, "the record written once Redis takes it")
        assert await r.exists(K.sent("turn-1", 0))
        assert (await ob.outcomes.outcome("turn-1"))[0][0] == "delivered"
        await until(lambda: ob.stats.handled >= 1, "the entry acked")
        assert (await r.xpending(K.outbox, OUTBOX_GROUP))["pending"] == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert len(ch.sent) == 1, ch.sent


async def test_an_outbox_started_while_redis_refuses_writes_delivers_once_it_takes_them(
        r: aioredis.Redis) -> None:
    ch = FakeChannel()
    ob = Outbox(r, {("fake", "default"): ch}, K, consumer="gw-a", block_ms=100)
    await refuse_writes(r)  # the consumer group cannot be created now
    stop = asyncio.Event()
    task = asyncio.create_task(ob.run(stop))
    try:
        await until(lambda: task.done() or ob.refusing, "the outbox to meet the refusal")
        assert not task.done(), task.exception()
        assert ob.refusing is not None and ob.refusing.startswith("OOM")
        await accept_writes(r)
        await r.xadd(K.outbox, reply_event("after the limit"))
        await until(lambda: ob.stats.handled, "the reply delivered and acked")
        assert "".join(t for _, _, t, _ in ch.sent) == "after the limit"
        assert ob.refusing is None
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_chat_waits_in_place_while_its_channel_meets_a_refusing_redis(
        r: aioredis.Redis) -> None:
    """The local channel writes its replies to Redis: a refused write there must hold
    the chat's later replies back, not let them overtake (one platform attempt only, so
    a retry budget cannot hide the order)."""
    refused = redis.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
    ch = FakeChannel(refused, refused)
    ob = Outbox(r, {("fake", "default"): ch}, K, consumer="gw-a", block_ms=100,
                max_attempts=1)
    await r.xadd(K.outbox, reply_event("first", reply_id="turn-1"))
    await r.xadd(K.outbox, reply_event("second", reply_id="turn-2"))
    stop = asyncio.Event()
    task = asyncio.create_task(ob.run(stop))
    try:
        await until(lambda: ob.stats.handled >= 2, "both replies sent and acked")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert [(rid, t) for rid, _, t, _ in ch.sent] == [("turn-1", "first"),
                                                     ("turn-2", "second")], ch.sent

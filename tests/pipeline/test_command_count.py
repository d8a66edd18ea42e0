"""The scripts and calls made leaner for issue 23 (fewer Redis commands per message)
keep what they promised, against a real Valkey: a batch of any size moves whole and in
order, the usage log still reads every metric, an enqueue is one transaction."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from rq import Queue

from channels.models import Inbound
from gateway.config import parse_config
from gateway.intake import DrainEnqueuer, Inbox
from gateway.queue import (
    DrainOptions,
    GatewayQueue,
    GroupQueue,
    Keys,
    enqueue_drain,
    events,
    job_queue,
    parse_entry,
)
from gateway.queue.budget import Budget, counters
from tests.pipeline.conftest import Valkey

K = Keys()
GROUP = "local:big"


@pytest.fixture
def r(valkey: Valkey) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(valkey.url)
    yield client
    client.close()


def test_take_moves_a_batch_larger_than_luas_stack_whole_and_in_order(r: redis.Redis) -> None:
    """take.lua moves the batch with a few multi-value RPUSHes, cut below Lua's stack
    limit (``unpack`` of ~8000 values fails): 12000 entries arrive whole, context first."""
    context = [f"{i} ctx-{i}" for i in range(2000)]
    mailbox = [f"{i} msg-{i}" for i in range(2000, 12000)]
    r.rpush(K.context(GROUP), *context)
    r.rpush(K.mailbox(GROUP), *mailbox)
    gq = GroupQueue(r, K, GROUP)
    batch = gq.take("tok", 30_000, 30_000, acquire=True)
    assert batch == context + mailbox
    assert [x.decode() for x in r.lrange(K.processing(GROUP), 0, -1)] == context + mailbox
    assert not r.exists(K.context(GROUP), K.mailbox(GROUP))
    # a retried take (the turn crashed) gets the same batch back, nothing else moved
    r.rpush(K.mailbox(GROUP), "12000 late")
    assert gq.take("tok", 30_000, 30_000, acquire=False) == context + mailbox
    assert r.lrange(K.mailbox(GROUP), 0, -1) == [b"12000 late"]


def test_settle_leaves_zero_metrics_out_and_the_log_still_reads_them(r: redis.Redis) -> None:
    budget = Budget(r, K)
    cs = counters(datetime(2026, 12, 3, 12, tzinfo=UTC), GROUP, "local:ann",
                  lambda scope, period: (None, None))
    held = budget.reserve(cs, 500)
    assert held.refused is None and held.held == ()  # no cap: nothing to reserve under
    budget.settle(held, 120, day="d2026-12-03", kind="turn", group=GROUP,
                  person="local:ann", tokens=(40, 0, 0), estimated=False)
    fields = {f.decode().rsplit("\t", 1)[1] for f in r.hkeys(K.usage_log("d2026-12-03"))}
    assert fields == {"cost", "req", "in"}  # out, cached and est stayed 0
    [metrics] = budget.log("d2026-12-03").values()
    assert metrics == {"cost": 120, "req": 1, "in": 40}
    assert all(budget.spent(c).reserved == 0 and budget.spent(c).spent == 120 for c in cs)
    assert all(int(r.ttl(K.budget(c.scope, c.period_id))) > 0 for c in cs)


def test_an_enqueue_is_one_transaction(r: redis.Redis) -> None:
    """RQ's two transactions (register the queue; save and push the job) become one:
    the job and its queue appear together."""
    q: Queue = job_queue(r, "pnc-drain")
    before = r.info("commandstats")
    job_id = enqueue_drain(q, GROUP, DrainOptions())
    after = r.info("commandstats")
    calls = {k: int(after[k]["calls"]) - int(before.get(k, {"calls": 0})["calls"])
             for k in after}
    assert calls.get("cmdstat_multi") == 1 and calls.get("cmdstat_exec") == 1
    assert q.job_ids == [job_id] and r.sismember("rq:queues", q.key)


def _calls(r: redis.Redis, run: Callable[[], object]) -> dict[str, int]:
    """Commands ``run`` made the server execute, by name (scripts' included)."""
    before: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
    run()
    after: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
    diff = {k.removeprefix("cmdstat_"): int(v["calls"]) - int(before.get(k, {"calls": 0})["calls"])
            for k, v in after.items()}
    return {k: n for k, n in diff.items() if n}


def test_reserve_reads_every_cap_at_once(r: redis.Redis) -> None:
    budget = Budget(r, K)
    cs = counters(datetime(2026, 12, 3, 12, tzinfo=UTC), GROUP, "local:ann",
                  lambda scope, period: (None, None))
    r.hset(K.budget_caps, cs[1].cap_field, "100")  # a run-time cap under the estimate
    refused: list[object] = []
    calls = _calls(r, lambda: refused.append(budget.reserve(cs, 500).refused))
    assert calls.get("hmget") == 2 and "hget" not in calls  # the caps, the capped counter
    assert refused == [cs[1]]
    assert all(budget.spent(c).reserved == 0 for c in cs)  # refused: nothing reserved


async def test_a_delivered_chunk_clears_only_a_mark_that_is_there(valkey: Valkey) -> None:
    ar = aioredis.Redis.from_url(valkey.url)
    r = redis.Redis.from_url(valkey.url)
    try:
        gq = GatewayQueue(ar, K)

        async def outcome(reply_id: str, delivered: bool) -> dict[str, int]:
            before: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
            await gq.record_outcome(GROUP, "local", reply_id, 0, delivered=delivered,
                                    detail="p1" if delivered else "gone", ttl=60, now=1)
            after: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
            return {k: int(v["calls"]) - int(before.get(k, {"calls": 0})["calls"])
                    for k, v in after.items()}

        assert (await outcome("r-1", True)).get("cmdstat_del", 0) == 0  # no mark: no DEL
        await outcome("r-2", False)  # a reply failed: the group's mark is set
        assert r.hget(K.undelivered(GROUP), "reply_id") == b"r-2"
        await outcome("r-3", True)  # a later reply got through: the mark goes
        assert not r.exists(K.undelivered(GROUP))
    finally:
        r.close()
        await ar.aclose()


def test_take_hands_a_lone_mailbox_over_whole(r: redis.Redis) -> None:
    """No context waiting: take.lua renames the mailbox to processing (one command for
    the move, none per entry), the batch whole and in order."""
    mailbox = [f"{i} msg-{i}" for i in range(5)]
    r.rpush(K.mailbox(GROUP), *mailbox)
    gq = GroupQueue(r, K, GROUP)
    out: list[object] = []
    calls = _calls(r, lambda: out.append(gq.take("tok", 30_000, 30_000, acquire=True)))
    assert out == [mailbox]
    assert [x.decode() for x in r.lrange(K.processing(GROUP), 0, -1)] == mailbox
    assert not r.exists(K.mailbox(GROUP))
    assert calls.get("rename") == 1 and "rpush" not in calls and "del" not in calls


def test_a_drained_finish_releases_batch_lease_and_lock_in_one_command(
        r: redis.Redis) -> None:
    r.rpush(K.mailbox(GROUP), "1 only")
    r.sadd(K.active, GROUP)
    gq = GroupQueue(r, K, GROUP)
    assert gq.take("tok", 30_000, 30_000, acquire=True) == ["1 only"]
    out: list[tuple[int, int]] = []
    calls = _calls(r, lambda: out.append(gq.finish("tok", None)))
    assert out == [(0, 0)]  # drained
    assert calls.get("del") == 1
    assert not r.exists(K.processing(GROUP), K.lease(GROUP), K.lock(GROUP))
    assert not r.sismember(K.active, GROUP)


def test_publish_keeps_the_ttl_its_begin_set(r: redis.Redis) -> None:
    msg = Inbound(channel="local", chat_id="big", is_group=False, sender_id="ann",
                  sender_name="Ann", message_id="m1", text="hi")
    gq = GroupQueue(r, K, msg.group)
    r.set(K.lock(msg.group), "tok")
    assert gq.turn_begin("turn-t", events.typing(msg), 5).attempts == 1
    done = events.done(msg, ["m1"], None, "turn-t")
    calls = _calls(r, lambda: gq.turn_publish("turn-t", K.lock(msg.group), "tok", None,
                                              done, None))
    assert "expire" not in calls
    assert r.hget(K.turn("turn-t"), "published") == b"1"
    assert int(r.ttl(K.turn("turn-t"))) > 0


async def test_a_message_without_files_is_pushed_in_one_script_or_held_behind(
        valkey: Valkey) -> None:
    """push.lua checks the group's media hold itself: a message without files costs one
    script when nothing is held, and still waits behind a held one (per-group order)."""
    cfg = parse_config({}, env={})
    ar = aioredis.Redis.from_url(valkey.url)
    r = redis.Redis.from_url(valkey.url)
    try:
        inbox = Inbox(cfg, ar, DrainEnqueuer(cfg, r, K), K)

        def dm(mid: str) -> Inbound:
            return Inbound(channel="local", chat_id="big", is_group=False, sender_id="ann",
                           sender_name="Ann", message_id=mid, text="hi")

        group = dm("m0").group
        warm = dm("w0").model_copy(update={"chat_id": "warm"})
        assert await inbox.accept(warm) == "engage"  # the script loaded (SCRIPT LOAD)
        before: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
        assert await inbox.accept(dm("m1")) == "engage"
        after: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
        scripts = sum(int(after[k]["calls"]) - int(before.get(k, {"calls": 0})["calls"])
                      for k in ("cmdstat_evalsha", "cmdstat_eval") if k in after)
        assert scripts == 1
        assert [parse_entry(x).msg["message_id"] for x in r.lrange(K.mailbox(group), 0, -1)
                ] == ["m1"]
        r.rpush(K.media_hold(group), json.dumps({"msg": dm("m2").model_dump(mode="json"),
                                                 "disposition": "engage"}))
        assert await inbox.accept(dm("m3")) == "engage"  # behind m2: held, not pushed
        assert [json.loads(x)["msg"]["message_id"] for x in r.lrange(K.media_hold(group), 0, -1)
                ] == ["m2", "m3"]
        assert r.llen(K.mailbox(group)) == 1 and r.sismember(K.media_groups, group)
        assert await inbox.accept(dm("m3")) == "duplicate"
    finally:
        r.close()
        await ar.aclose()


def test_a_turns_begin_reads_the_groups_undelivered_mark(r: redis.Redis) -> None:
    """The prompt's "your last reply was not delivered" note comes with the turn's start
    (one round trip), and only while the turn is not published yet."""
    msg = Inbound(channel="local", chat_id="big", is_group=False, sender_id="ann",
                  sender_name="Ann", message_id="m1", text="hi")
    gq = GroupQueue(r, K, msg.group)
    assert gq.turn_begin("turn-u0", None, 5).undelivered == {}
    mark = {"reply_id": "turn-old", "reason": "blocked", "at": "1"}
    r.hset(K.undelivered(msg.group), mapping=mark)
    assert gq.turn_begin("turn-u1", None, 5).undelivered == mark == gq.undelivered()
    r.set(K.lock(msg.group), "tok")
    gq.turn_publish("turn-u1", K.lock(msg.group), "tok", None,
                    events.done(msg, ["m1"], None, "turn-u1"), None)
    assert gq.turn_begin("turn-u1", None, 5).undelivered == {}  # a replay: no prompt

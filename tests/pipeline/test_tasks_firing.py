"""Scheduled tasks fired by the gateway's scheduler against a real Valkey: catch-up after
downtime (skip, once, all capped), definitions that survive a Redis wipe, and, with real
workers, a task every 2 s fired in order, once per due time with two schedulers, never
during a turn of its group."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from gateway.config import Settings, load_config
from gateway.intake import DrainEnqueuer
from gateway.queue import Keys, parse_entry
from gateway.tasks import Scheduler
from memory_store import GroupDirectory
from memory_store.tasks import Task, TaskStore, Where, validate
from memory_store.tasks import TaskSpec as Spec

from .conftest import Stack, Valkey, write_config

K = Keys()
GROUP = "local:room"
TASKS = """
[tasks]
min_interval = 1
tick = 0.2
rescan = 0.5
grace = 1
catchup_max = 2
"""
WHERE = Where(group=GROUP, channel="local", chat_id="room", is_group=True,
              creator="local:alice", creator_role="member")


def make(cfg: Settings, name: str, *, catchup: str = "once", every: str = "2s",
         now: datetime | None = None) -> Task:
    task = validate(Spec(name=name, text=f"run {name}", every=every, catchup=catchup), WHERE,
                    default_zone="UTC", min_interval=1, now=now or datetime.now(UTC))
    TaskStore(GroupDirectory(cfg.data_dir, GROUP)).create(task, actor="test", cap=10)
    return task


def mailbox(sync: redis.Redis) -> list[str]:
    return [str(parse_entry(e).msg["sender_id"])
            for e in sync.lrange(K.mailbox(GROUP), 0, -1)]


@pytest.fixture
async def sched(tmp_path: Path, valkey: Valkey
                ) -> AsyncIterator[tuple[Settings, redis.Redis, Scheduler]]:
    cfg = load_config(write_config(tmp_path / "pynanoclaw.toml", valkey.url, TASKS))
    sync = redis.Redis.from_url(valkey.url)
    client = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    yield cfg, sync, Scheduler(cfg, sync, client, DrainEnqueuer(cfg, sync, K), K)
    await client.aclose()
    sync.close()


async def test_catch_up_after_downtime_and_a_redis_wipe(
        sched: tuple[Settings, redis.Redis, Scheduler]) -> None:
    cfg, sync, scheduler = sched
    t0 = datetime.now(UTC).replace(microsecond=0)
    for policy in ("skip", "once", "all"):
        make(cfg, policy, catchup=policy, now=t0)
    assert scheduler.rescan() == 3  # first runs at t0 + 2 s
    # everything stopped from before the first due time until 5.5 s after it: three due
    # times (t0+2, +4, +6) passed, all more than ``grace`` (1 s) late
    fired = await scheduler.tick(now=(t0 + timedelta(seconds=7.5)).timestamp())
    senders = mailbox(sync)
    assert senders.count("task:skip") == 0
    assert senders.count("task:once") == 1
    assert senders.count("task:all") == 2  # all three, capped at catchup_max = 2
    assert fired == 3
    store = TaskStore(GroupDirectory(cfg.data_dir, GROUP))
    missed = {tid: [r for r in store.runs(tid) if r["outcome"] == "missed"]
              for tid in ("skip", "once", "all")}
    assert [m["count"] for m in missed["skip"]] == [3]
    assert [m["count"] for m in missed["once"]] == [2]
    assert [m["count"] for m in missed["all"]] == [1]
    # each runs next at t0 + 8 s; a tick on time fires each once, none is late
    for tid in ("skip", "once", "all"):
        assert scheduler.times.next_at(GROUP, tid) == (t0 + timedelta(seconds=8)).timestamp()
    sync.delete(K.mailbox(GROUP))
    assert await scheduler.tick(now=(t0 + timedelta(seconds=8.2)).timestamp()) == 3
    # Redis loses everything: the files bring every task back, after its last run
    sync.flushall()
    assert scheduler.times.members() == []
    assert scheduler.rescan() == 3
    for tid in ("skip", "once", "all"):
        assert scheduler.times.next_at(GROUP, tid) == (t0 + timedelta(seconds=10)).timestamp()
    # a paused task is not fired, and loses its time
    store.update("once", actor="test", state="paused", why="test")
    assert await scheduler.tick(now=(t0 + timedelta(seconds=10.1)).timestamp()) == 2
    assert scheduler.times.next_at(GROUP, "once") is None


async def test_two_schedulers_claim_each_due_time_once(
        sched: tuple[Settings, redis.Redis, Scheduler], valkey: Valkey) -> None:
    cfg, sync, one = sched
    client = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    two = Scheduler(cfg, sync, client, DrainEnqueuer(cfg, sync, K), K)
    t0 = datetime.now(UTC).replace(microsecond=0)
    make(cfg, "tick", now=t0)
    one.rescan()
    two.rescan()
    counts = []
    for i in range(1, 6):  # five due times, each ticked by both at the same moment
        now = (t0 + timedelta(seconds=2 * i + 0.1)).timestamp()
        counts.append(sum(await asyncio.gather(one.tick(now=now), two.tick(now=now))))
    await client.aclose()
    assert counts == [1, 1, 1, 1, 1]
    assert mailbox(sync) == ["task:tick"] * 5
    # the claim, not only the mailbox's dedupe: no due time was fired by both
    outcomes = [r["outcome"] for r in TaskStore(GroupDirectory(cfg.data_dir, GROUP)).runs("tick")]
    assert outcomes == ["fired"] * 5


@pytest.mark.timeout(120)
async def test_a_task_every_2s_runs_in_order_never_during_a_turn(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey, TASKS)
    try:
        stack.start_workers(1, env={"PNC_TEST_DELAY": "0.3"})
        make(stack.config, "beat", now=datetime.now(UTC))
        await stack.start_gateway()
        # a second scheduler, as a second gateway would run
        assert stack.gateway is not None and stack.gateway.inbox is not None
        client = aioredis.Redis.from_url(valkey.url, decode_responses=True)
        other = Scheduler(stack.config, stack.r, client,
                          DrainEnqueuer(stack.config, stack.r, K), K)
        stop = asyncio.Event()
        second = asyncio.create_task(other.run(stop))

        def task_ids() -> list[str]:
            return [i for t in stack.turns() for i in t["ids"] if i.startswith("task-beat-")]

        await stack.wait_for(lambda: len(task_ids()) >= 2, 60, "two runs")
        await stack.ask("room", "bob", "hello during the task", group=True, mention=True)
        await stack.wait_for(lambda: len(task_ids()) >= 4, 60, "four runs")
        await stack.wait_for(lambda: [r["outcome"] for r in TaskStore(GroupDirectory(
            stack.data_dir, GROUP)).runs("beat", 50)].count("ok") >= 3, 30, "runs logged ok")
        stop.set()
        await second
        await client.aclose()
        ids = task_ids()
        assert len(ids) == len(set(ids))  # each due time fired once, by one scheduler
        assert stack.gateway.scheduler is not None  # the gateway's own, and the other
        dues = [int(i.rsplit("-", 1)[1]) for i in ids]
        assert dues == sorted(dues)  # in order
        assert all(b - a == 2000 for a, b in itertools.pairwise(dues))
        assert stack.r.lrange("test:overlap", 0, -1) == []  # never two turns of the group
        assert any("hello during the task" in " ".join(t["texts"]) for t in stack.turns())
        # the bot answered the runs in the chat, quoting no message (a run's id exists on
        # no platform), and the person's message as usual
        chunks = [e for e in stack.chat_events("room") if e.get("type") == "chunk"]
        assert any("task-beat-" in c["text"] and c["reply_to_id"] == "" for c in chunks)
        assert not any(c["reply_to_id"].startswith("task-") for c in chunks)
        runs = TaskStore(GroupDirectory(stack.data_dir, GROUP)).runs("beat", 50)
        assert "fired-again" not in [r["outcome"] for r in runs]
        fired = [r["due"] for r in runs if r["outcome"] == "fired"]
        assert len(fired) == len(set(fired)) >= 4  # no due time claimed by both schedulers
    finally:
        await stack.close()


@pytest.mark.timeout(120)
async def test_stop_everything_across_due_times_and_restart(tmp_path: Path,
                                                            valkey: Valkey) -> None:
    """The real thing, no clock games: the gateway and Redis stop for 7 s (three or four
    runs of an every-2-s task), then start again; each policy does what it says."""
    stack = Stack(tmp_path, valkey, TASKS)  # no workers: the mailbox keeps every run
    store = TaskStore(GroupDirectory(stack.data_dir, GROUP))

    def outcomes(tid: str) -> list[dict[str, object]]:
        return store.runs(tid, 100)

    try:
        t0 = datetime.now(UTC)
        for policy in ("skip", "once", "all"):
            make(stack.config, policy, catchup=policy, now=t0)
        await stack.start_gateway()
        await stack.wait_for(lambda: all(any(r["outcome"] == "fired" for r in outcomes(t))
                                         for t in ("skip", "once", "all")), 30, "first runs")
        await stack.stop_gateway()
        valkey.stop()
        await asyncio.sleep(7)
        valkey.start()  # AOF: the next fire times survived the restart
        before = {t: len(outcomes(t)) for t in ("skip", "once", "all")}
        await stack.start_gateway()
        await stack.wait_for(lambda: all(any(r["outcome"] == "missed"
                                             for r in outcomes(t)[before[t]:])
                                         for t in ("skip", "once")), 30, "catch-up")
        await stack.wait_for(lambda: sum(r["outcome"] == "fired"
                                         for r in outcomes("all")[before["all"]:]) >= 2, 30)
        await stack.stop_gateway()
        missed = {t: [int(str(r["count"])) for r in outcomes(t)[before[t]:]
                      if r["outcome"] == "missed"] for t in ("skip", "once", "all")}
        # n runs came due since the last one fired; the newest may be on time (within
        # grace) at the first tick after the restart, and fires under every policy
        [once] = missed["once"]
        n = once + 1  # once: fires one of them (the newest), the others are missed
        assert n >= 3  # the stop spanned at least three due times
        assert missed["all"] == [n - 2]  # all, capped at catchup_max = 2
        assert missed["skip"] in ([n], [n - 1])  # skip: none of the late ones
        restart = next(r for r in outcomes("all")[before["all"]:] if r["outcome"] == "fired")
        assert restart["due"] is not None
        assert valkey.url and stack.r.zcard(f"{K.prefix}tasks:due") == 3  # all scheduled on
    finally:
        await stack.close()


async def test_a_creator_no_longer_allowed_has_their_task_paused_and_the_chat_told(
        tmp_path: Path, valkey: Valkey) -> None:
    policy = '[policy]\ndm = "allowlist"\nallow = ["local:bob"]\n'
    cfg = load_config(write_config(tmp_path / "pynanoclaw.toml", valkey.url,
                                   TASKS + policy))
    sync = redis.Redis.from_url(valkey.url)
    client = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    scheduler = Scheduler(cfg, sync, client, DrainEnqueuer(cfg, sync, K), K)
    t0 = datetime.now(UTC).replace(microsecond=0)
    store = TaskStore(GroupDirectory(cfg.data_dir, "local:dm-alice"))
    for chat, creator in (("dm-alice", "local:alice"), ("dm-bob", "local:bob")):
        where = Where(group=f"local:{chat}", channel="local", chat_id=chat, is_group=False,
                      creator=creator, creator_role="owner")
        task = validate(Spec(name="daily", text="plan", every="2s"), where,
                        default_zone="UTC", min_interval=1, now=t0)
        TaskStore(GroupDirectory(cfg.data_dir, where.group)).create(task, actor="t", cap=5)
    assert scheduler.rescan() == 2
    for i in (1, 2):  # alice is off the allowlist: paused at her first run, told once
        await scheduler.tick(now=(t0 + timedelta(seconds=2 * i + 0.1)).timestamp())
    paused = store.get("daily")
    assert paused is not None and paused.state == "paused" and "no longer allowed" in paused.why
    told = [json.loads(f[b"data"]) for _, f in sync.xrange(K.outbox) if f[b"type"] == b"reply"]
    assert [(n["chat_id"], "no longer allowed" in n["text"]) for n in told] == [
        ("dm-alice", True)]
    assert [parse_entry(e).msg["sender_id"] for e in sync.lrange(K.mailbox("local:dm-bob"),
                                                                 0, -1)] == ["task:daily"] * 2
    await client.aclose()
    sync.close()

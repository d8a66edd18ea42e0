"""``/healthz`` under pressure: a Redis that refuses writes and a disk short of space are
degraded (listed, still up: 200), a Redis that does not answer is down (503); below the
hard disk watermark the inbox refuses new messages so the platform retries them;
``pynanoclaw status`` says the same and does not count a dead worker's registration.
Real Valkey, the gateway in-process with the local channel."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from channels.models import Inbound
from gateway.intake import InboxRefused
from gateway.operations import status_checks
from tests.pipeline.conftest import Stack, Valkey


def inbound(mid: str) -> Inbound:
    return Inbound(channel="local", chat_id="ada", sender_id="ada", sender_name="ada",
                   text="hello", message_id=mid, is_group=False)


async def test_a_full_redis_is_degraded_and_a_silent_one_is_down(
        tmp_path: Path, valkey: Valkey) -> None:
    # no transcription: its missing worker would be degraded too (test_health_transcription)
    stack = Stack(tmp_path, valkey, '[media]\ntranscription = "off"\n')
    try:
        gw = await stack.start_gateway()
        health = await gw.health()
        assert health["up"] and health["ok"] and health["degraded"] == [], health
        stack.r.config_set("maxmemory-policy", "noeviction")
        stack.r.config_set("maxmemory", 1)  # Redis' memory is full: writes get -OOM
        health = await gw.health()
        assert health["up"] and not health["ok"]
        assert any(d.startswith("redis: memory") and "refuses writes" in d
                   for d in health["degraded"]), health["degraded"]
        stack.r.config_set("maxmemory", 0)
        valkey.stop()
        health = await gw.health()
        assert not health["up"] and not health["ok"]
    finally:
        await stack.close()


async def test_below_the_watermarks_the_operator_is_told_and_new_work_refused(
        tmp_path: Path, valkey: Valkey, caplog: pytest.LogCaptureFixture) -> None:
    # watermarks above any real free space: both are crossed on this disk
    stack = Stack(tmp_path, valkey, "[disk]\nwarn_free_mb = 1e12\nstop_free_mb = 1e11\n")
    try:
        gw = await stack.start_gateway()
        health = await gw.health()
        assert health["up"] and not health["ok"]
        assert any(d.startswith("disk: ") and "refused" in d for d in health["degraded"])
        assert gw.inbox is not None
        for mid in ("m1", "m2"):
            with pytest.raises(InboxRefused):
                await gw.inbox.accept(inbound(mid))
        assert not stack.r.keys("pnc:mailbox:*")  # nothing half-taken
        warned = [m for m in caplog.messages if "below [disk] stop_free_mb" in m]
        assert len(warned) == 1, caplog.messages  # told once, not once per message
    finally:
        await stack.close()


def test_status_reports_pressure_and_ignores_a_dead_workers_registration(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey, "[disk]\nwarn_free_mb = 1e12\n")
    try:
        stack.start_workers(1)
        deadline = time.monotonic() + 60
        while not stack.r.smembers("rq:workers"):
            assert time.monotonic() < deadline, "the worker never registered"
            time.sleep(0.1)
        stack.kill_workers()  # -9: RQ keeps its registration for minutes
        stack.r.config_set("maxmemory-policy", "noeviction")
        stack.r.config_set("maxmemory", 1)
        checks = {c.name: c for c in status_checks(stack.config_path, model=False)}
        assert not checks["workers"].ok, checks["workers"]
        assert "1 registration(s) of dead workers" in checks["workers"].detail
        assert not checks["disk"].ok and "warn_free_mb" in checks["disk"].detail
        assert not checks["redis state"].ok
        assert "refuses writes" in checks["redis state"].detail
        assert checks["redis"].ok  # it answers and is persistent
    finally:
        stack.r.config_set("maxmemory", 0)
        stack.kill_workers()
        stack.r.close()


async def test_a_gateway_task_that_ends_is_restarted_and_listed(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey)
    runs: list[int] = []
    done = asyncio.Event()

    async def flaky() -> None:  # ends unexpectedly the first time, then runs
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("boom")
        await done.wait()

    try:
        gw = await stack.start_gateway()
        gw._spawn("flaky", flaky)  # as start() runs the outbox, sweeper and heartbeat
        await stack.wait_for(lambda: len(runs) == 2, 20, "the task restarted")
        health = await gw.health()
        assert "gateway task flaky ended unexpectedly and was restarted" in \
            health["degraded"] and health["up"]
    finally:
        done.set()
        await stack.close()

"""The transcription worker in ``pynanoclaw status`` and ``/healthz``: with voice notes
transcribed, a real worker process on the transcription queue is counted (alive / none,
apart from the turn workers), and none alive degrades ``/healthz``; a killed worker's
registration is not counted; with transcription off nothing is asked of it. Real
Valkey, real worker processes, the gateway in-process with the local channel."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.queue import DEFAULT_QUEUE, transcribe_queue
from gateway.status import run_checks
from tests.pipeline.conftest import Stack, Valkey

QUEUE = transcribe_queue(DEFAULT_QUEUE)
NONE_ALIVE = f"transcription: no worker alive on queue {QUEUE}; voice notes reach the " \
             "model untranscribed"


async def checks(stack: Stack) -> dict[str, tuple[bool, str]]:
    """``pynanoclaw status``'s checks (in a thread: each channel check runs its own loop)."""
    found = await asyncio.to_thread(lambda: list(run_checks(stack.config_path, model=False)))
    return {c.name: (c.ok, c.detail) for c in found}


async def registered(stack: Stack) -> None:
    await stack.wait_for(lambda: bool(stack.r.smembers(f"rq:workers:{QUEUE}")), 60,
                         "the transcription worker's registration")


async def test_the_transcription_worker_is_counted_and_its_absence_degrades(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey)  # [media] transcription: "local", the default
    try:
        gw = await stack.start_gateway()
        health = await gw.health()
        assert NONE_ALIVE in health["degraded"] and health["up"], health
        assert health["transcription"] == {"queue": QUEUE, "alive": 0}
        ok, detail = (await checks(stack))["transcription workers"]
        assert not ok and detail.startswith(f"none alive on queue {QUEUE}: "), detail
        stack.start_workers(1, queues=[QUEUE])  # as `pynanoclaw run` starts it
        await registered(stack)
        health = await gw.health()
        assert NONE_ALIVE not in health["degraded"], health["degraded"]
        assert health["transcription"]["alive"] == 1
        found = (await checks(stack))
        assert found["transcription workers"] == (True, f"1 alive on queue {QUEUE}")
        assert not found["workers"][0]  # it takes no turn: not a turn worker
        stack.kill_workers()  # -9: RQ keeps its registration for minutes
        ok, detail = (await checks(stack))["transcription workers"]
        assert not ok and "1 registration(s) of dead workers on this host not counted" \
            in detail, detail
        assert NONE_ALIVE in (await gw.health())["degraded"]
    finally:
        await stack.close()


async def test_with_transcription_off_no_worker_is_asked_for(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey, '[media]\ntranscription = "off"\n')
    try:
        gw = await stack.start_gateway()
        health = await gw.health()
        assert "transcription" not in health
        assert not any(d.startswith("transcription") for d in health["degraded"])
        assert (await checks(stack))["transcription workers"] == \
            (True, "none needed ([media] transcription is off)")
    finally:
        await stack.close()

"""The transcription worker in ``pynanoclaw status`` and ``/healthz``: with voice notes
transcribed, a real worker process on the transcription queue is counted (alive / none,
apart from the turn workers), and none alive degrades ``/healthz``; a killed worker's
registration is not counted; with transcription off, or no channel that carries files
(the quickstart's local chat), nothing is asked of it. Real Valkey, real worker
processes, the gateway in-process with the local channel and Telegram on its fake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.operations import status_checks
from gateway.queue import DEFAULT_QUEUE, transcribe_queue
from tests.channels.harness_telegram import env as telegram_env
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline.conftest import Stack, Valkey

QUEUE = transcribe_queue(DEFAULT_QUEUE)
NONE_ALIVE = f"transcription: no worker alive on queue {QUEUE}; voice notes reach the " \
             "model untranscribed"


async def checks(stack: Stack) -> dict[str, tuple[bool, str]]:
    """``pynanoclaw status``'s checks (in a thread: each channel check runs its own loop)."""
    found = await asyncio.to_thread(lambda: list(status_checks(stack.config_path, model=False)))
    return {c.name: (c.ok, c.detail) for c in found}


async def registered(stack: Stack) -> None:
    await stack.wait_for(lambda: bool(stack.r.smembers(f"rq:workers:{QUEUE}")), 60,
                         "the transcription worker's registration")


@pytest.fixture
async def telegram(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A channel that brings voice notes: Telegram on its fake (its config block)."""
    fake = FakeTelegram()
    await fake.start()
    for name, value in telegram_env().items():
        monkeypatch.setenv(name, value)
    yield (f'[channels.telegram]\nbase_url = "{fake.base_url}"\n'
           f'base_file_url = "{fake.base_file_url}"\npoll_timeout = 1\n')
    await fake.stop()


async def test_the_transcription_worker_is_counted_and_its_absence_degrades(
        tmp_path: Path, valkey: Valkey, telegram: str) -> None:
    stack = Stack(tmp_path, valkey, telegram)  # [media] transcription: "local", the default
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


@pytest.mark.parametrize("off", ["transcription", "no channel with files"])
async def test_with_transcription_off_no_worker_is_asked_for(
        tmp_path: Path, valkey: Valkey, telegram: str, off: str) -> None:
    stack = Stack(tmp_path, valkey, f'{telegram}[media]\ntranscription = "off"\n'
                  if off == "transcription" else "")  # the local channel only
    try:
        gw = await stack.start_gateway()
        health = await gw.health()
        assert "transcription" not in health
        assert not any(d.startswith("transcription") for d in health["degraded"])
        assert (await checks(stack))["transcription workers"] == \
            (True, "none needed (transcription or downloads off, or no channel carries files)")
    finally:
        await stack.close()

"""The transcription worker in ``pynanoclaw status`` and ``/healthz``: with voice notes
transcribed, a real worker process on the transcription queue is counted (alive / none,
apart from the turn workers), and none alive is a warning, not a failure: every chat is
still answered (a voice note reaches the model untranscribed), so ``status`` prints WARN
and exits 3 (1 stays "a chat goes unanswered") and ``/healthz`` lists it under
``warnings`` with ``ok`` true; a killed worker's registration is not counted; with
transcription off, or no channel that carries files (the quickstart's local chat),
nothing is asked of it. Real Valkey, real worker processes, the gateway in-process with
the local channel and Telegram on its fake."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.operations import status_checks
from gateway.queue import DEFAULT_QUEUE, transcribe_queue
from gateway.queue.transcribe import transcribers
from tests.channels.harness_telegram import env as telegram_env
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline.conftest import ROOT, Stack, Valkey

QUEUE = transcribe_queue(DEFAULT_QUEUE)
NONE_ALIVE = f"transcription: no worker alive on queue {QUEUE}; voice notes reach the " \
             "model untranscribed"


async def checks(stack: Stack) -> dict[str, tuple[bool, str]]:
    """``pynanoclaw status``'s checks (in a thread: each channel check runs its own loop)."""
    found = await asyncio.to_thread(lambda: list(status_checks(stack.config_path, model=False)))
    return {c.name: (c.ok, c.detail) for c in found}


async def registered(stack: Stack, queue: str = QUEUE) -> None:
    await stack.wait_for(lambda: bool(stack.r.smembers(f"rq:workers:{queue}")), 60,
                         f"a worker's registration on {queue}")


async def status_cli(stack: Stack) -> subprocess.CompletedProcess[str]:
    """``pynanoclaw status --no-model``, the command an operator's monitor runs."""
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "gateway.cli", "status", "--config",
                         str(stack.config_path), "--no-model"],
        capture_output=True, text=True, cwd=ROOT, env=stack.env, timeout=120)


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


async def test_the_transcription_worker_is_counted_and_its_absence_warns(
        tmp_path: Path, valkey: Valkey, telegram: str) -> None:
    stack = Stack(tmp_path, valkey, telegram)  # [media] transcription: "local", the default
    try:
        gw = await stack.start_gateway()
        health = await gw.health()
        assert NONE_ALIVE in health["warnings"] and health["up"], health
        assert NONE_ALIVE not in health["degraded"]
        assert health["transcription"] == {"queue": QUEUE, "alive": 0}
        ok, detail = (await checks(stack))["transcription workers"]
        assert not ok and detail.startswith(f"none alive on queue {QUEUE}: "), detail
        stack.start_workers(1, queues=[QUEUE])  # as `pynanoclaw run` starts it
        await registered(stack)
        health = await gw.health()
        assert NONE_ALIVE not in health["warnings"], health["warnings"]
        assert health["transcription"]["alive"] == 1
        found = (await checks(stack))
        assert found["transcription workers"] == (True, f"1 alive on queue {QUEUE}")
        assert not found["workers"][0]  # it takes no turn: not a turn worker
        stack.kill_workers()  # -9: RQ keeps its registration for minutes
        ok, detail = (await checks(stack))["transcription workers"]
        assert not ok and "1 registration(s) of dead workers on this host not counted" \
            in detail, detail
        # the voice-note wait asks the same question: a dead worker transcribes nothing
        assert transcribers(stack.r, DEFAULT_QUEUE) == 0
        assert NONE_ALIVE in (await gw.health())["warnings"]
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
        assert not any(d.startswith("transcription")
                       for d in health["degraded"] + health["warnings"])
        assert (await checks(stack))["transcription workers"] == \
            (True, "none needed (transcription or downloads off, or no channel carries files)")
    finally:
        await stack.close()


async def test_no_transcription_worker_exits_3_and_a_chat_unanswered_still_exits_1(
        tmp_path: Path, valkey: Valkey, telegram: str) -> None:
    """Turn workers up, no transcription worker: the bot answers every chat, so status
    exits 3 with a WARN line and no FAIL, and /healthz stays ok; with the turn workers
    down too, a FAIL: exit 1, what a monitor reading 1 as "down" relies on."""
    stack = Stack(tmp_path, valkey, telegram)
    try:
        gw = await stack.start_gateway()
        stack.start_workers(1)  # the turn workers' queues, not the transcription one
        await registered(stack, DEFAULT_QUEUE)
        health = await gw.health()
        assert health["ok"] and health["warnings"] == [NONE_ALIVE], health
        out = await status_cli(stack)
        assert out.returncode == 3, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        assert [line[:4] for line in lines if line[:4] in ("FAIL", "WARN")] == ["WARN"], lines
        assert f"WARN transcription workers: none alive on queue {QUEUE}: " in out.stdout
        assert "ok   workers: 1 alive" in out.stdout
        stack.stop_workers()  # SIGTERM: the worker leaves RQ's registry
        out = await status_cli(stack)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "FAIL workers: none alive" in out.stdout
        assert "WARN transcription workers: none alive" in out.stdout
    finally:
        await stack.close()

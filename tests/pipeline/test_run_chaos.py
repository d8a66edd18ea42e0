"""``pynanoclaw run`` under fire: the embedded Valkey SIGKILLed in the middle of a burst,
and a random worker SIGKILLed every second during a larger one. Every message is
answered exactly once, in order per chat, and ``run`` is still running afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from pathlib import Path

import pytest

from tests.pipeline.chaos import Run

pytestmark = pytest.mark.slow


def worker_pids(parent: int) -> list[int]:
    """The ``python -m workers`` children of ``parent`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == parent and b"workers" in cmdline:
            out.append(int(entry.name))
    return out


def check_once_in_order(sent: dict[str, list[str]], got: dict[str, list[str]]) -> None:
    for chat, ids in sent.items():
        assert got[chat] == ids, f"{chat}: answered {got[chat]}, sent {ids}"


@pytest.mark.timeout(400)
async def test_embedded_valkey_killed_mid_burst(tmp_path: Path) -> None:
    run = Run(tmp_path, workers=2)
    try:
        await run.ready()
        killed: list[int] = []

        async def kill_redis(i: int) -> None:
            if i == 4:  # mid-burst: 100 of 200 messages pushed
                pid = run.redis_pid()
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        sent = await run.push_all(20, 10, kill_redis)
        got = await run.answers(sent, timeout=240)
        check_once_in_order(sent, got)
        assert killed and run.redis_pid() != killed[0]  # a new server, same URL
        assert run.proc.poll() is None
        assert "restarting it from its append-only file" in run.log.read_text()
    finally:
        run.stop()


@pytest.mark.timeout(600)
async def test_a_random_worker_killed_every_second(tmp_path: Path) -> None:
    run = Run(tmp_path, workers=4)
    rng = random.Random(8)
    kills = 0
    try:
        await run.ready()
        stop = asyncio.Event()

        async def killer() -> None:
            nonlocal kills
            while not stop.is_set():
                await asyncio.sleep(1.0)
                workers = worker_pids(run.proc.pid)
                if workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(rng.choice(workers), signal.SIGKILL)
                        kills += 1

        task = asyncio.get_running_loop().create_task(killer())
        try:
            sent = await run.push_all(50, 20)
            got = await run.answers(sent, timeout=420)
            # keep killing past what the old supervisor took (5 restarts per worker per
            # minute, then `run` exited): the run must outlive any number of deaths
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 120
            while kills < 25 and loop.time() < deadline:
                await asyncio.sleep(0.5)
        finally:
            stop.set()
            await task
        check_once_in_order(sent, got)
        assert kills >= 25
        assert run.proc.poll() is None
        last = await run.push_all(1, 1, prefix="after")  # and it still answers
        assert (await run.answers(last, timeout=120)) == {"after0": ["after0-m000"]}
    finally:
        run.stop()

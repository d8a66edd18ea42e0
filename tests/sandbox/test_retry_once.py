"""End to end: a retried turn does not rerun a sandbox command that already ran.

Real workers, a real tool host process and its sandbox. The scripted model
(``tests.sandbox.once_model``) runs ``echo x >> counter``, then its request fails (the job
is retried), or its worker is SIGKILLed (a new worker retries the turn); the retry's
model asks for the same call and sees the stored output, the command having run once,
while a call the first attempt never made runs. A tool host killed mid-command: the
retry is told the outcome is unknown, and the command does not run twice.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.queue.toolonce import STORED
from tests.pipeline.conftest import Stack, Valkey
from tests.sandbox.hoststack import start_host, tools_stack

CONFIG = """
[tools]
sandbox = true
"""

Hosts = list[subprocess.Popen[bytes]]


@pytest.fixture
def hosts() -> Hosts:
    return []


@pytest.fixture
async def stack(tmp_path: Path, valkey: Valkey, hosts: Hosts) -> AsyncIterator[Stack]:
    async with tools_stack(tmp_path, valkey, "tests.sandbox.once_model:model", CONFIG,
                           hosts) as s:
        yield s


def lines(stack: Stack, chat: str, name: str) -> list[str]:
    path = stack.data_dir / "groups/local" / chat / "workspace" / name
    return path.read_text().splitlines() if path.exists() else []


def returns(stack: Stack) -> list[str]:
    return [x.decode() for x in stack.r.lrange("test:once_returns", 0, -1)]


def assert_ran_once(stack: Stack, chat: str, seen: list[str]) -> None:
    assert lines(stack, chat, "counter") == ["x"]  # the command ran once
    assert lines(stack, chat, "other") == ["y"]  # the retry's new call ran
    first, stored, other = seen
    assert "lines=1" in first and STORED not in first
    # the retry's model saw the earlier attempt's output, marked as stored
    assert f"{STORED}\nexit code: 0" in stored and "lines=1" in stored
    assert 'ok="true"' in stored
    assert "other=1" in other and STORED not in other


@pytest.mark.asyncio
async def test_a_retried_turn_does_not_rerun_the_command(stack: Stack) -> None:
    # the model request fails after the command ran: the job is retried
    (stack.tmp / "fail").touch()
    ex = await stack.ask("team", "ada", "count", group=True, mention=True, timeout=90)
    assert ex.reply == "done"
    assert not (stack.tmp / "fail").exists()  # the first attempt did fail
    assert_ran_once(stack, "team", returns(stack))
    # the worker is killed after the command ran: a new worker retries the turn
    (stack.tmp / "die").touch()
    asked = asyncio.create_task(
        stack.ask("crew", "ada", "count", group=True, mention=True, timeout=90))
    await stack.wait_for(lambda: stack.workers[0].poll() is not None, 60, "the worker killed")
    stack.kill_workers()
    stack.start_workers(1)  # takes the turn over once the dead worker's lock expires
    ex = await asked
    assert ex.reply == "done"
    assert_ran_once(stack, "crew", returns(stack)[3:])


@pytest.mark.asyncio
async def test_a_host_killed_mid_command_is_not_run_again(stack: Stack, hosts: Hosts) -> None:
    asked = asyncio.create_task(
        stack.ask("team", "ada", "go slow", group=True, mention=True, timeout=90))
    await stack.wait_for(lambda: lines(stack, "team", "slow"), 60, "the command to start")
    hosts[0].kill()  # mid-command: its result is never recorded
    hosts[0].wait()
    stack.kill_workers()  # it would wait for the result until the drain job's deadline
    # in a thread: the gateway runs in this event loop meanwhile
    hosts.append(await asyncio.to_thread(start_host, stack))
    stack.start_workers(1)
    ex = await asked
    assert ex.reply == "told"
    (told,) = returns(stack)
    assert 'ok="false"' in told and "its outcome is unknown" in told
    assert lines(stack, "team", "slow") == ["s"]

"""A worker that dies on every attempt of a turn: the run's supervisor keeps restarting
it (backoff, never giving up), the chat gets one failure notice, the batch is a dead
letter whose reason names the crash, ``pynanoclaw status`` fails naming it, and
``pynanoclaw dead retry`` runs the batch again once the cause is gone. Real Valkey, real
worker processes under ``WorkerSupervisor``, the gateway and the local channel."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gateway.cli import app
from gateway.config import load_config
from gateway.operations import WorkerSupervisor, status_checks, worker_command
from gateway.queue import DeadLetters
from tests.pipeline.conftest import ROOT, Stack, Valkey
from workers.turn import FAILURE_NOTICE


def crash_config(path: Path, url: str) -> None:
    path.write_text(f"""
data_dir = "data"
[redis]
url = "{url}"
[model]
provider = "function"
function = "tests.pipeline.crashing_model:model"
[memory]
backend = "file"
consolidate_every = 0
[queue]
lease_ttl = 1
lock_ttl = 1
sweep_interval = 0.3
max_attempts = 2
retries = 0
[media]
transcription = "off"  # no transcription worker here: its check would fail too
[channels.local]
""", encoding="utf-8")


async def supervise(sup: WorkerSupervisor, stop: asyncio.Event) -> None:
    while not stop.is_set():
        sup.poll()  # raises if it gave up: the test then fails
        await asyncio.sleep(0.1)


async def test_crash_loop_is_dead_lettered_reported_and_retried(
    tmp_path: Path, valkey: Valkey
) -> None:
    stack = Stack(tmp_path, valkey)
    crash_config(stack.config_path, valkey.url)
    stack.config = load_config(stack.config_path)
    (tmp_path / "crash").touch()
    cmd = worker_command(stack.config_path, valkey.url, log_level="WARNING")
    sup = WorkerSupervisor(1, cmd, env=stack.env, cwd=ROOT, backoff_first=0.2,
                           backoff_max=0.5)
    stop = asyncio.Event()
    sup.start()
    task = asyncio.get_running_loop().create_task(supervise(sup, stop))
    try:
        gw = await stack.start_gateway()
        gw.reporters.append(sup.state)
        ex = await stack.ask("ada", "ada", "CRASH please", timeout=120)
        assert ex.reply == FAILURE_NOTICE
        await stack.settled("local:ada")
        # one notice in the chat, whatever the number of attempts
        chunks = [e for e in stack.chat_events("ada") if e["type"] == "chunk"]
        assert [c["text"] for c in chunks] == [FAILURE_NOTICE]
        # the supervisor saw the deaths by name and kept going
        assert sup.deaths.get("killed by SIGKILL", 0) >= 2
        assert not task.done()
        dead = DeadLetters(stack.r)
        assert dead.counts() == {"local:ada": 1}
        [record] = dead.records("local:ada")
        assert "worker died" in record.why
        assert dead.retrying() == []
        health = await gw.health()
        assert health["dead_letters"] == {"local:ada": 1}
        assert health["workers"]["deaths"]["killed by SIGKILL"] >= 2

        checks = await asyncio.to_thread(
            lambda: list(status_checks(stack.config_path, model=False)))
        failed = [c for c in checks if not c.ok]
        assert [c.name for c in failed] == ["dead letters local:ada"], checks
        assert "worker died" in failed[0].detail
        assert {c.name for c in checks} >= {"config", "redis", "workers", "channel local:default"}
        # the CLI: same lines, exit status 1
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gateway.cli", "status", "--config",
             str(stack.config_path), "--no-model"],
            capture_output=True, text=True, cwd=ROOT, env=stack.env, timeout=60)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "FAIL dead letters local:ada" in out.stdout

        listing = CliRunner().invoke(app, ["dead", "list", "--config",
                                           str(stack.config_path)])
        assert listing.exit_code == 0
        assert "CRASH please" in listing.output and "worker died" in listing.output

        # the cause is gone: retry runs the same messages again, as a fresh turn
        (tmp_path / "crash").unlink()
        after = await stack.client.last_id("ada")  # type: ignore[union-attr]
        retried = CliRunner().invoke(app, ["dead", "retry", "local:ada", "--config",
                                           str(stack.config_path)])
        assert retried.exit_code == 0 and "1 message(s)" in retried.output
        again = CliRunner().invoke(app, ["dead", "retry", "--all", "--config",
                                         str(stack.config_path)])
        assert "no dead letters to retry" in again.output  # once

        def answered() -> bool:
            assert stack.client is not None
            return any(e["type"] == "chunk" and e["text"].startswith("ack ")
                       for e in stack.chat_events("ada"))

        await stack.wait_for(answered, 60, "the retried turn's answer")
        await stack.settled("local:ada")
        assert after  # the stream had the notice before the retry
        chunks = [e["text"] for e in stack.chat_events("ada") if e["type"] == "chunk"]
        assert chunks[0] == FAILURE_NOTICE and len(chunks) == 2
        assert chunks[1].startswith("ack ") and ex.message_id in chunks[1]
        assert DeadLetters(stack.r).counts() == {}
    finally:
        stop.set()
        await task
        sup.stop(grace=5)
        await stack.close()

"""Which project files run while one Telegram message goes from the adapter to the
episode file and back to the platform, found by tracing a real run (never a hand-kept
list): the fake Telegram Bot API with the real python-telegram-bot (polling), the
gateway in this process, one ``python -m workers`` process (scripted model), a real
Valkey. Both processes are traced (``tests.structure.profiler``); the window opens once
everything is started and idle, and closes when the reply reached the fake Telegram and
the episode file exists.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.structure.profiler import Recorder
from tests.structure.rules import ROOT

CONFIG = """data_dir = "data"
[redis]
url = "{url}"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[memory]
backend = "file"
[channels.telegram]
base_url = "{base_url}"
base_file_url = "{base_file_url}"
poll_timeout = 1
"""


async def _wait(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def trace_one_message() -> dict[str, set[str]]:
    """Per process ("gateway", "worker"): the project files whose code ran."""
    from gateway.app import Gateway
    from gateway.config import load_config
    from gateway.operations import start_valkey
    from tests.channels.harness_telegram import env, new_fake
    from tests.channels.kit import load_fixture

    tmp = Path(tempfile.mkdtemp(prefix="pnc-trace-"))
    server = start_valkey(tmp / "redis")  # a port of its own, retried if taken
    url = f"redis://127.0.0.1:{server.port}"
    fake = new_fake()
    await fake.start()
    config = tmp / "pynanoclaw.toml"
    config.write_text(CONFIG.format(url=url, base_url=fake.base_url,
                                    base_file_url=fake.base_file_url), encoding="utf-8")
    out = tmp / "worker-files.txt"
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.structure.profiler", "workers", "--config", str(config),
         "--redis-url", url, "--log-level", "WARNING"],
        cwd=ROOT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PNC_TRACE_OUT": str(out)})
    gateway = Gateway(load_config(config), url, env=env(), consumer="trace")
    recorder = Recorder()
    # hooked from the start, so threads made later (the executor RQ enqueues from) are
    # traced too; the window itself starts with ``reset`` below
    recorder.start()
    try:
        await gateway.start()
        # warm-up: one message through the whole path, so imports and first-use set-up
        # (the agent, the group directory) are not counted as the path itself
        await fake.enqueue(load_fixture("telegram", "private_text"))
        await _wait(lambda: len(fake.sent) >= 1, 90, "the warm-up reply")
        await asyncio.sleep(1.0)  # let the worker finish the warm-up turn
        episodes = tmp / "data" / "groups" / "telegram"
        before = set(episodes.rglob("episodes/*/*.md"))
        recorder.reset()
        worker.send_signal(signal.SIGUSR1)
        await fake.enqueue(load_fixture("telegram", "voice"))  # a later DM: a new turn
        await _wait(lambda: len(fake.sent) >= 2, 90, "the reply")
        await _wait(lambda: set(episodes.rglob("episodes/*/*.md")) - before, 30, "the episode")
        gateway_files = recorder.stop()
        worker.send_signal(signal.SIGUSR2)
        await _wait(out.exists, 10, "the worker's trace")
        worker_files = set(out.read_text(encoding="utf-8").split())
    finally:
        recorder.stop()
        await gateway.stop()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        await fake.stop()
        server.stop()
    return {"gateway": gateway_files, "worker": worker_files}


def traced_files() -> dict[str, set[str]]:
    return asyncio.run(trace_one_message())

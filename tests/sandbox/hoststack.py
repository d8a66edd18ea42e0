"""A pipeline stack with a real tool host process: the scripted ``model``, ``config``
appended to the stack's TOML, the host (waited for until it heartbeats), one worker and
the gateway. For the sandbox suites that drive whole turns."""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.config import load_config
from gateway.queue import Keys
from gateway.queue.toolcalls import host_key, host_status
from gateway.toolhost.process import tools_command, tools_env
from tests.pipeline.conftest import ROOT, Stack, Valkey


def start_host(s: Stack) -> subprocess.Popen[bytes]:
    """A tool host process for ``s``, once it answers (heartbeats, or pops calls)."""
    s.r.delete(host_key(Keys()))  # a killed host's heartbeat must not count
    host = subprocess.Popen(tools_command(s.config_path, log_level="WARNING"),
                            env=tools_env(s.config, s.env, s.valkey.url), cwd=ROOT)
    deadline = time.monotonic() + 30
    while host_status(s.r) is None:
        if host.poll() is not None or time.monotonic() > deadline:
            host.kill()
            host.wait()
            raise AssertionError("no tool host")
        time.sleep(0.05)
    return host


@asynccontextmanager
async def tools_stack(tmp_path: Path, valkey: Valkey, model: str, config: str,
                      hosts: list[subprocess.Popen[bytes]] | None = None
                      ) -> AsyncIterator[Stack]:
    """The stack; ``hosts`` (when given) gets the host process, and every host a test
    adds to it is stopped at the end too."""
    s = Stack(tmp_path, valkey)
    text = s.config_path.read_text().replace("tests.pipeline.scripted:model", model)
    s.config_path.write_text(text + config)
    s.config = load_config(s.config_path)
    running = hosts if hosts is not None else []
    try:
        running.append(start_host(s))
        s.start_workers(1)
        await s.start_gateway()
        yield s
    finally:
        await s.close()
        for host in running:
            host.terminate()
            host.wait(timeout=20)

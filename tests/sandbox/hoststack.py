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
from gateway.queue.toolcalls import host_status
from gateway.toolhost.process import tools_command, tools_env
from tests.pipeline.conftest import ROOT, Stack, Valkey


@asynccontextmanager
async def tools_stack(tmp_path: Path, valkey: Valkey, model: str,
                      config: str) -> AsyncIterator[Stack]:
    s = Stack(tmp_path, valkey)
    text = s.config_path.read_text().replace("tests.pipeline.scripted:model", model)
    s.config_path.write_text(text + config)
    s.config = load_config(s.config_path)
    host = subprocess.Popen(tools_command(s.config_path, log_level="WARNING"),
                            env=tools_env(s.config, s.env, valkey.url), cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while host_status(s.r) is None:
            assert host.poll() is None and time.monotonic() < deadline, "no tool host"
            time.sleep(0.05)
        s.start_workers(1)
        await s.start_gateway()
        yield s
    finally:
        await s.close()
        host.terminate()
        host.wait(timeout=20)

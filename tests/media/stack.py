"""A Telegram media stack: the fake Bot API serving files, a real Valkey, one real
worker (the image-taking scripted model) and the gateway, in the test's loop or as a
real subprocess a test may ``kill -9``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.e2e import ROOT, valkey, worker
from tests.channels.harness_telegram import env, new_fake
from tests.channels.kit import eventually
from tests.fakes.telegram_api import FakeTelegram

ALICE = 111222333  # allowed (``[policy] allow``)
STRANGER = 444555666  # a DM under pairing, never approved
FILE_CAP = 100_000


def telegram_tables(fake: FakeTelegram) -> str:
    return f"""
[channels.telegram]
base_url = "{fake.base_url}"
base_file_url = "{fake.base_file_url}"
poll_timeout = 1
backoff_initial = 0.05
backoff_max = 0.5
"""


def config(path: Path, url: str, tables: str, allow: str = f"telegram:{ALICE}") -> Path:
    path.write_text(f"""
data_dir = "data"
[redis]
url = "{url}"
[model]
provider = "function"
function = "tests.media.image_model:model"
images = true
[memory]
backend = "file"
[worker]
job_timeout = 60
[queue]
lease_ttl = 2
lock_ttl = 2
sweep_interval = 0.3
[policy]
dm = "pairing"
allow = ["{allow}"]
[media]
max_file_bytes = {FILE_CAP}
{tables}""", encoding="utf-8")
    return path


def dm(message_id: int, sender: int, *, caption: str | None = None,
       photo: tuple[str, bytes] | None = None,
       document: tuple[str, str, bytes] | None = None, state_size: bool = True,
       voice: tuple[str, bytes] | None = None) -> dict[str, Any]:
    """A private-chat update as the Bot API sends it, with a photo, a document or a voice
    note."""
    user = {"id": sender, "is_bot": False, "first_name": f"user{sender}"}
    msg: dict[str, Any] = {"message_id": message_id, "date": 1764410000, "from": user,
                           "chat": {**user, "type": "private"}}
    del msg["chat"]["is_bot"]
    if caption is not None:
        msg["caption"] = caption
    if photo is not None:
        fid, data = photo
        msg["photo"] = [{"file_id": fid, "file_unique_id": "u" + fid, "width": 4,
                         "height": 3, "file_size": len(data)}]
    if document is not None:
        fid, name, data = document
        msg["document"] = {"file_id": fid, "file_unique_id": "u" + fid, "file_name": name,
                           "mime_type": "application/octet-stream",
                           **({"file_size": len(data)} if state_size else {})}
    if voice is not None:
        fid, data = voice
        msg["voice"] = {"file_id": fid, "file_unique_id": "u" + fid, "duration": 3,
                        "mime_type": "audio/ogg", "file_size": len(data)}
    return {"message": msg}


def turns(url: str) -> list[dict[str, Any]]:
    """What the image-taking scripted model saw, turn by turn."""
    with redis.Redis.from_url(url) as r:
        return [json.loads(t) for t in r.lrange("test:media_turns", 0, -1)]


def saw_files(url: str, image: bytes, doc: bytes, *, doc_name: str = "report.pdf") -> str:
    """Check what every channel's media test checks: the model got ``image`` as its one
    image, both files are named as stored, the document's name as data, and an over-cap
    and a refused-type file as not kept. Returns the turns' prompts, joined."""
    seen = turns(url)
    image_sha = hashlib.sha256(image).hexdigest()
    doc_sha = hashlib.sha256(doc).hexdigest()
    assert [i for t in seen for i in t["images"]] == \
        [{"media_type": "image/png", "sha256": image_sha}]
    prompt = "\n".join(t["prompt"] for t in seen)
    assert f"file {image_sha}.png" in prompt
    assert f"file {doc_sha}.pdf" in prompt and repr(doc_name) in prompt
    assert f"not kept: it is over the {FILE_CAP / 1e6:g} MB limit" in prompt
    assert "not kept: it is a file type I don't accept" in prompt
    return prompt


async def answered(url: str, *message_ids: str, timeout: float = 60) -> None:
    async def all_in() -> bool:
        seen = {i for t in turns(url) for i in t["ids"]}
        return all(m in seen for m in message_ids)

    await eventually(all_in, timeout=timeout)


@dataclass
class Stack:
    fake: FakeTelegram
    url: str
    config_path: Path
    data: Path
    gateway: Gateway | None = None
    process: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    def turns(self) -> list[dict[str, Any]]:
        return turns(self.url)

    def attachments(self, chat: int = ALICE) -> list[str]:
        folder = self.data / "groups" / "telegram" / str(chat) / "attachments"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))

    def replies_to(self, message_id: int) -> list[str]:
        return [s["text"] for s in self.fake.sent
                if (s.get("reply_parameters") or {}).get("message_id") == message_id]

    async def answered(self, *message_ids: int, timeout: float = 60) -> None:
        await answered(self.url, *map(str, message_ids), timeout=timeout)

    async def start_in_loop(self) -> None:
        self.gateway = Gateway(load_config(self.config_path), self.url, env=env(),
                               consumer="media-test")
        await self.gateway.start()

    def start_process(self) -> None:
        log = self.config_path.parent / f"gateway{len(self.logs)}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "gateway", "--config",
                 str(self.config_path), "--log-level", "WARNING"],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT), **env()})

    def kill_process(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    async def stop(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 20)
            except subprocess.TimeoutExpired:
                self.kill_process()
        self.process = None


@asynccontextmanager
async def media_stack(tmp_path: Path) -> AsyncIterator[Stack]:
    """Everything but the gateway, which the test starts (in its loop or as a process)."""
    fake = new_fake()
    await fake.start()
    try:
        with valkey(tmp_path) as url:
            path = config(tmp_path / "pynanoclaw.toml", url, telegram_tables(fake))
            with worker(path, url, {"PNC_TEST_REDIS_URL": url}):
                stack = Stack(fake, url, path, tmp_path / "data")
                try:
                    yield stack
                finally:
                    await stack.stop()
    finally:
        await fake.stop()

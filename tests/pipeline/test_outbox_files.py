"""The outbox's ``file`` events (gateway/outgoing/_filesend.py) on a real Valkey and the real local
channel: a stored file is sent once however often its event comes; a platform that
cannot send files (``Channel.send_file``'s default) and a missing stored copy give the
chat one text note instead. The sweep drops a stored file once every send naming it is
done, or past the retention, and never one a send still waits for."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import redis.asyncio as aioredis

from channels.base import Channel
from channels.local import LocalChannel
from channels.models import Outbound
from gateway.intake import GroupFiles
from gateway.outgoing import Outbox, prune_sent_files
from gateway.queue import Keys, events
from memory_store.files import outboxfiles
from tests.pipeline.conftest import Valkey

DATA = b"\x00report\xff" * 100


class NoFiles(LocalChannel):
    """The local channel as a platform without files: ``Channel``'s own default."""

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        return await Channel.send_file(self, message, data, name, caption)


def event(reply_id: str, sha: str) -> events.OutboxEvent:
    return events.file(Outbound(channel="local", chat_id="ada", text="the report",
                                reply_id=reply_id), sha, "report.bin", len(DATA))


async def test_file_events_are_sent_once_or_noted_once(tmp_path: Path, valkey: Valkey) -> None:
    files = GroupFiles(tmp_path)
    sha = hashlib.sha256(DATA).hexdigest()
    stored = files.outbox_file("local:ada", sha)
    stored.parent.mkdir(parents=True)
    stored.write_bytes(DATA)
    r = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    channel = LocalChannel(valkey.url)
    outbox = Outbox(r, {("local", "default"): channel}, Keys(), files=files)
    try:
        for _ in range(2):  # the second: a redelivered event
            assert await outbox.handle(event("turn-1.file.a", sha))
        stream = [f for _, f in await r.xrange(channel.keys.out("ada"))]
        assert [(f["type"], f["name"], f["caption"]) for f in stream] == \
            [("file", "report.bin", "the report")]
        # a platform without files, and a stored copy gone: one note each, once
        outbox = Outbox(r, {("local", "default"): NoFiles(valkey.url)}, Keys(), files=files)
        for _ in range(2):
            assert await outbox.handle(event("turn-2.file.b", sha))
            assert await outbox.handle(event("turn-3.file.c", "0" * 64))
        notes = [f["text"] for _, f in await r.xrange(channel.keys.out("ada"))
                 if f["type"] == "chunk"]
        assert notes == [
            "(I could not send the file report.bin: this platform cannot send files.)",
            "(I could not send the file report.bin: the stored copy is missing.)"]
    finally:
        await r.aclose()
        await channel.stop()


async def test_the_sweep_drops_sent_files_and_keeps_waiting_ones(tmp_path: Path,
                                                                 valkey: Valkey) -> None:
    files = GroupFiles(tmp_path)
    folder = files.outbox_file("local:ada", "0" * 64).parent
    other = b"\x01draft\xfe" * 50
    sha, other_sha = hashlib.sha256(DATA).hexdigest(), hashlib.sha256(other).hexdigest()
    # as the worker stores them: the report named by two turns' sends, the draft by one
    outboxfiles.store(folder, sha, DATA, "turn-1.file.a")
    outboxfiles.store(folder, sha, DATA, "turn-2.file.a")
    outboxfiles.store(folder, other_sha, other, "turn-3.file.b")
    r = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    channel = LocalChannel(valkey.url)
    outbox = Outbox(r, {("local", "default"): channel}, Keys(), files=files)
    try:
        assert await outbox.handle(event("turn-1.file.a", sha))
        # one of the report's two sends is done: it stays for the other
        assert await prune_sent_files(r, Keys(), files, retention_days=90) == []
        assert await outbox.handle(event("turn-2.file.a", sha))
        assert await prune_sent_files(r, Keys(), files, retention_days=90) == [f"local:ada/{sha}"]
        assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == \
            sorted([other_sha, f"{other_sha}.json"])
        # the draft's send never went: kept until the retention, then dropped
        assert await prune_sent_files(r, Keys(), files, retention_days=0,
                                      now=time.time() + 10**9) == []
        assert await prune_sent_files(r, Keys(), files, retention_days=90,
                                      now=time.time() + 91 * 86400) == [f"local:ada/{other_sha}"]
        assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == []
    finally:
        await r.aclose()
        await channel.stop()

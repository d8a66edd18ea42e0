"""Contract harness for the Matrix adapter: the fake client-server API serving recorded
events from its /sync, and a real ``MatrixChannel`` (matrix-nio unmodified, pointed at the
fake by ``homeserver``). E2E is off here: the fake has no key server; the real-Synapse
tests (``test_matrix_e2e.py``) cover encrypted rooms."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from channels.base import Chunk
from channels.matrix import MatrixChannel
from channels.matrix.syncer import TOKEN_KEY
from channels.models import Outbound
from tests.channels.kit import (
    AdapterHarness,
    HarnessSpec,
    MemoryCursorStore,
    RecordingSink,
    Sent,
    SentFile,
    load_fixture,
)
from tests.fakes.matrix_api import ACCESS_TOKEN, BOT, BOT_NAME, FakeMatrix, Room, failure_for

GROUP = "!group:example.org"
DM = "!dm:example.org"
#: a thread root in the group that replies are threaded to, and a message in it
THREAD_ROOT = "$root1"
TRIGGER = "$trigger1"

HISTORY = {
    "type": "m.room.message", "sender": "@alice:example.org", "event_id": "$old1",
    "origin_server_ts": 1700000000000, "content": {"msgtype": "m.text", "body": "old news"},
}  # fmt: skip


def new_fake() -> FakeMatrix:
    group = Room(
        GROUP,
        {BOT: BOT_NAME, "@alice:example.org": "Alice", "@bob:example.org": "Bob",
         "@carol:example.org": "Carol"},
        name="Claw Testers",
        power={"@alice:example.org": 100},
        history=[HISTORY],
    )  # fmt: skip
    dm = Room(DM, {BOT: BOT_NAME, "@alice:example.org": "Alice"})
    return FakeMatrix([group, dm])


def env() -> dict[str, str]:
    return {"MATRIX_ACCESS_TOKEN": ACCESS_TOKEN}


def block(fake: FakeMatrix, store: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "homeserver": fake.base_url, "user_id": BOT, "store_dir": str(store),
        "encryption": False, "sync_timeout": 1, "backoff_initial": 0.01, "backoff_max": 0.05,
        **overrides,
    }  # fmt: skip


_VOID = {"br", "hr", "img", "input", "meta", "link"}


class _Balance(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ok = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.ok = False


def html_balanced(text: str) -> bool:
    parser = _Balance()
    parser.feed(text)
    parser.close()
    return parser.ok and not parser.stack


class MatrixHarness:
    """``AdapterHarness`` for Matrix (/sync long polling)."""

    marker_fixture = "dm_text"
    quotes_replies = True

    def __init__(self, fake: FakeMatrix, channel: MatrixChannel) -> None:
        self.fake = fake
        self.channel = channel
        self.sink = RecordingSink()
        self.cursors = MemoryCursorStore()
        self.secrets = [ACCESS_TOKEN]
        self.batches: dict[str, int] = {}

    async def inject(self, fixture: str) -> None:
        self.batches[fixture] = await self.fake.enqueue(load_fixture("matrix", fixture))

    async def redeliver_pending(self) -> None:
        """Nothing: the homeserver answers the same batch until the token moves."""

    async def acked(self, fixture: str) -> bool | None:
        stored = await self.cursors.get(TOKEN_KEY)
        return stored is not None and int(stored.lstrip("s")) > self.batches[fixture]

    def sent(self) -> list[Sent]:
        out = []
        for record in self.fake.sent:
            content = record["content"]
            relates = content.get("m.relates_to") or {}
            thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
            reply = (relates.get("m.in_reply_to") or {}).get("event_id")
            if relates.get("is_falling_back"):
                reply = None
            out.append(Sent(
                chat_id=record["room_id"], text=content.get("formatted_body", content["body"]),
                thread_id=thread, reply_to_id=reply,
                formatted=content.get("format") == "org.matrix.custom.html",
            ))  # fmt: skip
        return out

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        self.fake.fail_next_send(failure_for(status, retry_after))

    def sent_files(self) -> list[SentFile]:
        out = []
        for record in self.fake.sent:
            content = record["content"]
            if content.get("msgtype") != "m.file":
                continue
            name, _, data = self.fake.media[content["url"]]
            relates = content.get("m.relates_to") or {}
            out.append(SentFile(record["room_id"], content["filename"], data, content["body"],
                                relates.get("event_id") if relates.get("rel_type") == "m.thread"
                                else None))
            assert name == content["filename"]
        return out

    def outbound(self, text: str) -> Outbound:
        return Outbound(channel="matrix", chat_id=GROUP, thread_id=THREAD_ROOT,
                        reply_to_id=TRIGGER, text=text, reply_id="turn-1")

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        return html_balanced(chunk.text)


@asynccontextmanager
async def matrix_harness(**overrides: Any) -> AsyncIterator[MatrixHarness]:
    """The fake started, the real adapter started against it (first sync done)."""
    fake = new_fake()
    await fake.start()
    try:
        with tempfile.TemporaryDirectory(prefix="pnc-matrix-") as store:
            channel = MatrixChannel.from_config("default", block(fake, Path(store), **overrides),
                                                env())
            harness = MatrixHarness(fake, channel)
            channel.bind(harness.cursors)
            await channel.start(harness.sink)
            try:
                yield harness
            finally:
                await channel.stop()
    finally:
        await fake.stop()


def _sync() -> Any:
    return matrix_harness()


HARNESSES = [HarnessSpec("matrix-sync", "matrix", _sync)]


def _conforms(harness: MatrixHarness) -> AdapterHarness:
    return harness  # mypy checks MatrixHarness against the protocol here

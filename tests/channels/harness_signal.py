"""Contract harness for the Signal adapter: the local fake ``signal-cli daemon --http``
plus a real ``SignalChannel`` reading its events stream and calling its JSON-RPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from channels.base import Chunk
from channels.models import Outbound
from channels.signal import SignalChannel
from channels.signal.events import LAST_KEY
from channels.signal.normalize import GROUP_PREFIX
from channels.signal.render import SignalChunk
from tests.channels.kit import (
    AdapterHarness,
    HarnessSpec,
    MemoryCursorStore,
    RecordingSink,
    Sent,
    SentFile,
    fences_balanced,
    load_fixture,
)
from tests.fakes.signal_cli import BOT_NUMBER, BOT_UUID, PROXY_AUTH, FakeSignalCli, failure_for

GROUP_ID = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
MEMBERS = ["+15550002000", "+15550003000"]
#: the message replies quote: Alice's "we ship on Friday" (group_plain.json)
TRIGGER = "a11ce000-0000-4000-8000-000000000002:1700000000002"
AUTH_ENV = "SIGNAL_PROXY_AUTH"


def env() -> dict[str, str]:
    return {AUTH_ENV: PROXY_AUTH}


def block(fake: FakeSignalCli, **overrides: Any) -> dict[str, Any]:
    """A config block pointing the adapter at the fake, with test-sized timings."""
    return {
        "url": fake.base_url,
        "number": BOT_NUMBER,
        "uuid": BOT_UUID,
        "receive_mode": fake.receive_mode,
        "auth_env": AUTH_ENV,
        "idle_timeout": 2.0,
        "backoff_initial": 0.01,
        "backoff_max": 0.05,
        **overrides,
    }


def new_fake(receive_mode: str = "on-connection", keepalive: float = 0.3) -> FakeSignalCli:
    return FakeSignalCli(receive_mode=receive_mode, keepalive=keepalive, auth=PROXY_AUTH,
                         groups={GROUP_ID: list(MEMBERS)})


def sent_records(fake: FakeSignalCli) -> list[Sent]:
    out = []
    for record in fake.sent:
        if record.get("groupId"):
            chat = GROUP_PREFIX + str(record["groupId"])
        else:
            chat = str(record["recipient"][0])
        quoted = None
        if record.get("quoteTimestamp") is not None:
            quoted = f"{record['quoteAuthor']}:{record['quoteTimestamp']}"
        out.append(Sent(chat_id=chat, text=record["message"], reply_to_id=quoted,
                        formatted=bool(record.get("textStyle"))))
    return out


class SignalHarness:
    """``AdapterHarness`` for Signal."""

    marker_fixture = "dm_text"
    quotes_replies = True

    def __init__(self, fake: FakeSignalCli, channel: SignalChannel) -> None:
        self.fake = fake
        self.channel = channel
        self.sink = RecordingSink()
        self.cursors = MemoryCursorStore()
        self.secrets = [PROXY_AUTH]

    async def inject(self, fixture: str) -> None:
        await self.fake.receive(load_fixture("signal", fixture))

    async def redeliver_pending(self) -> None:
        """Nothing to do: signal-cli never redelivers; the adapter holds the message and
        retries the sink itself."""

    async def acked(self, fixture: str) -> bool | None:
        """Whether the adapter stored the message as its cursor (signal-cli itself has no
        client acknowledgement)."""
        envelope = load_fixture("signal", fixture)["envelope"]
        author = envelope.get("sourceUuid") or envelope.get("sourceNumber")
        wanted = f"{author}:{envelope['timestamp']}"
        return any(key == LAST_KEY and value == wanted for key, value in self.cursors.writes)

    def sent(self) -> list[Sent]:
        return sent_records(self.fake)

    def sent_files(self) -> list[SentFile]:
        """Each attachment of each ``send``, in its chat, the text as its caption."""
        chats = [s.chat_id for s in sent_records(self.fake)]
        return [SentFile(chat, f.filename or "", f.data, str(record.get("message") or ""),
                         mime=f.mime)
                for chat, record in zip(chats, self.fake.sent, strict=True)
                for f in record["files"]]

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        self.fake.fail_next("send", failure_for(status, MEMBERS[0], retry_after))

    def outbound(self, text: str) -> Outbound:
        return Outbound(channel="signal", chat_id=GROUP_PREFIX + GROUP_ID,
                        reply_to_id=TRIGGER, text=text, reply_id="turn-1")

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        """Balanced fences, and every style range inside the chunk's text."""
        if not isinstance(chunk, SignalChunk):
            return False
        size = len(chunk.text.encode("utf-16-le")) // 2
        for style in chunk.styles:
            start, length, _ = style.split(":")
            if int(start) < 0 or int(length) <= 0 or int(start) + int(length) > size:
                return False
        return fences_balanced(chunk.text)


@asynccontextmanager
async def signal_harness(
    receive_mode: str = "on-connection", **overrides: Any
) -> AsyncIterator[SignalHarness]:
    """The fake started and the real adapter connected to its events stream."""
    fake = new_fake(receive_mode)
    await fake.start()
    try:
        channel = SignalChannel.from_config("default", block(fake, **overrides), env())
        harness = SignalHarness(fake, channel)
        channel.bind(harness.cursors)
        await channel.start(harness.sink)
        await fake.wait_subscribers(1)
        try:
            yield harness
        finally:
            await channel.stop()
    finally:
        await fake.stop()


def _on_connection() -> Any:
    return signal_harness("on-connection")


HARNESSES = [HarnessSpec("signal", "signal", _on_connection)]


def _conforms(harness: SignalHarness) -> AdapterHarness:
    return harness  # mypy checks SignalHarness against the protocol here

"""Test rigs for the Discord adapter.

``DiscordRig`` (Discord's own tests): a fake Discord with one guild (a text channel,
an announced thread, a thread only reachable through GET /channels/{id}), a human,
a DM, and a started ``DiscordChannel`` whose sink records what it receives.

``HARNESSES`` (the shared contract suite, tests/channels/test_contract.py): the same
fake built around the ids of the recorded fixtures in tests/channels/fixtures/discord/.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from channels.base import Channel, Chunk
from channels.discord import DiscordChannel
from channels.models import Inbound, Outbound
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
from tests.fakes.discord_api import FakeDiscord, snowflake, user_json

#: Distinctive, so "the token never appears" checks cannot pass by accident.
TOKEN = "MTIzNDU2Nzg5.discord-test-token.zQx7-s3cr3t"


async def wait_until(pred: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll until ``pred()`` holds; fail the test (not hang) if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


class DiscordRig:
    """A fake Discord world plus an adapter connected to it."""

    def __init__(self, *, start: bool = True, **fake_options: Any) -> None:
        self.fake = FakeDiscord(token=TOKEN, **fake_options)
        self.guild = self.fake.add_guild()
        self.general = self.fake.add_text_channel(self.guild, "general")
        self.thread = self.fake.add_thread(self.general, "design talk")
        self.hidden_thread = self.fake.add_thread(self.general, "late thread", announce=False)
        self.alice = user_json(snowflake(), "alice")
        self.dm = self.fake.add_dm(self.alice)
        self.received: list[Inbound] = []
        self.sink_failures = 0  # make the next N sink calls raise (Redis down)
        self.sink_calls = 0
        self._start = start
        self.channel: DiscordChannel | None = None
        self.config: dict[str, Any] = {}

    @property
    def bot(self) -> dict[str, Any]:
        return self.fake.bot

    async def sink(self, inbound: Inbound) -> None:
        self.sink_calls += 1
        if self.sink_failures > 0:
            self.sink_failures -= 1
            raise ConnectionError("redis unavailable")
        self.received.append(inbound)

    def make_channel(self, **config: Any) -> DiscordChannel:
        block = {"api_base_url": self.fake.base_url, **self.config, **config}
        return DiscordChannel.from_config("default", block, {"DISCORD_BOT_TOKEN": TOKEN})

    async def __aenter__(self) -> DiscordRig:
        await self.fake.start()
        if self._start:
            self.channel = self.make_channel()
            self.channel.sink_retry_base = 0.02
            await self.channel.start(self.sink)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.channel is not None:
            await self.channel.stop()
        await self.fake.stop()

    # -------------------------------------------------------------- helpers
    def mention(self) -> dict[str, Any]:
        return dict(self.bot)

    async def say(self, channel: dict[str, Any], content: str, **kw: Any) -> dict[str, Any]:
        """Alice (by default) posts ``content``; returns the MESSAGE_CREATE payload."""
        author = kw.pop("author", self.alice)
        msg = self.fake.message_json(channel, author, content, **kw)
        await self.fake.dispatch_message(msg)
        return msg

    async def next_inbound(self, count: int = 1) -> Inbound:
        await wait_until(lambda: len(self.received) >= count)
        return self.received[count - 1]


# ---------------------------------------------------------------------- contract kit
#: The world the recorded fixtures (tests/channels/fixtures/discord/) live in.
FIXTURE_BOT = "1100000000000000001"
FIXTURE_GUILD = "1100000000000000100"
FIXTURE_GENERAL = "1100000000000000200"
FIXTURE_THREAD = "1100000000000000300"
FIXTURE_DM = "1100000000000000400"
FIXTURE_ALICE = user_json("1100000000000000500", "alice")


class DiscordContractHarness:
    """``tests.channels.kit.AdapterHarness`` for Discord (gateway receive mode).

    The gateway has no ack and no redelivery: ``acked`` is None and
    ``redeliver_pending`` does nothing; the adapter itself keeps retrying the sink.
    """

    marker_fixture = "guild_mention"
    quotes_replies = True

    def __init__(self) -> None:
        self.fake = FakeDiscord(token=TOKEN, bot_id=FIXTURE_BOT)
        guild = self.fake.add_guild("Claw Lab", id=FIXTURE_GUILD)
        general = self.fake.add_text_channel(guild, "general", id=FIXTURE_GENERAL)
        self.thread = self.fake.add_thread(general, "release plan", id=FIXTURE_THREAD)
        self.fake.add_dm(FIXTURE_ALICE, id=FIXTURE_DM)
        # an existing message in the thread for replies to point at
        self.trigger = self.fake.message_json(self.thread, FIXTURE_ALICE, "kick-off")
        self.sink = RecordingSink()
        self.cursors = MemoryCursorStore()
        self.secrets = [TOKEN]
        self.discord: DiscordChannel | None = None
        self.channel: Channel = DiscordChannel.from_config(
            "default", {}, {"DISCORD_BOT_TOKEN": TOKEN}
        )  # replaced by ``start`` once the fake's port is known

    async def start(self) -> None:
        await self.fake.start()
        self.discord = DiscordChannel.from_config(
            "default", {"api_base_url": self.fake.base_url}, {"DISCORD_BOT_TOKEN": TOKEN}
        )
        self.discord.sink_retry_base = 0.02
        self.discord.sink_retry_cap = 0.2
        self.discord.bind(self.cursors)
        self.channel = self.discord
        await self.discord.start(self.sink)

    async def close(self) -> None:
        await self.channel.stop()
        await self.fake.stop()

    async def inject(self, fixture: str) -> None:
        payload = load_fixture("discord", fixture)
        await self.fake.dispatch(payload["t"], payload["d"])

    async def redeliver_pending(self) -> None:
        return None

    async def acked(self, fixture: str) -> bool | None:
        return None

    def sent(self) -> list[Sent]:
        result = []
        for msg in self.fake.sent:
            channel = self.fake.channels[msg["channel_id"]]
            is_thread = channel["type"] in (10, 11, 12)
            ref = msg.get("message_reference")
            result.append(Sent(
                chat_id=channel["parent_id"] if is_thread else channel["id"],
                text=msg["content"],
                thread_id=channel["id"] if is_thread else None,
                reply_to_id=ref["message_id"] if ref else None,
                formatted=True,  # Discord always renders Markdown
            ))
        return result

    def sent_files(self) -> list[SentFile]:
        result = []
        for f in self.fake.files_sent:
            channel = self.fake.channels[f["channel_id"]]
            is_thread = channel["type"] in (10, 11, 12)
            result.append(SentFile(channel["parent_id"] if is_thread else channel["id"],
                                   f["name"], f["data"], f["content"],
                                   channel["id"] if is_thread else None))
        return result

    async def lose_next_answer(self) -> None:
        """The next message is created, its answer never arrives (the connection drops)."""
        self.fake.drop_after_accept = 1

    async def answer_lost(self) -> None:
        """Nothing comes later: the re-send's nonce finds the first message."""

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        target = self.thread["id"]
        if status == 429:
            self.fake.fail_rate_limited(target, retry_after if retry_after is not None else 1.0)
        elif status == 403:
            self.fake.fail_next("POST", target, 403,
                                {"message": "Missing Permissions", "code": 50013})
        else:
            self.fake.fail_next("POST", target, status,
                                {"message": f"{status}: Internal Server Error", "code": 0})

    def outbound(self, text: str) -> Outbound:
        return Outbound(
            channel="discord",
            chat_id=FIXTURE_GENERAL,
            thread_id=self.thread["id"],
            text=text,
            reply_to_id=self.trigger["id"],
            reply_id="contract-reply",
        )

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        return fences_balanced(chunk.text)


@contextlib.asynccontextmanager
async def _gateway_harness() -> AsyncIterator[AdapterHarness]:
    harness = DiscordContractHarness()
    await harness.start()
    try:
        yield harness
    finally:
        await harness.close()


HARNESSES = [HarnessSpec(id="discord-gateway", platform="discord", factory=_gateway_harness)]

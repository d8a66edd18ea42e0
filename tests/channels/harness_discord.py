"""Test rig for the Discord adapter: a fake Discord with one guild (a text channel,
an announced thread, a thread only reachable through GET /channels/{id}), a human,
a DM, and a started ``DiscordChannel`` whose sink records what it receives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from channels.discord import DiscordChannel
from channels.models import Inbound
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

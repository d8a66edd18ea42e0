"""The gateway stops its channels only after the outbox finished the send in flight: a
channel stopped first (its HTTP client closed) failed that send, and the outbox counted
it as an ambiguous send and tried it again on the next start."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest

from channels.base import (
    NO_CONTEXT,
    Channel,
    ChannelContext,
    ChannelLimits,
    Chunk,
    InboundSink,
)
from channels.models import Outbound
from gateway.app import CHANNEL_REGISTRY
from gateway.queue import Keys, events
from tests.pipeline.conftest import Stack, Valkey


class GatedChannel(Channel):
    """A channel whose send waits until the test lets it finish; it records its life."""

    name = "gated"
    limits = ChannelLimits(max_message_len=4000)
    log: ClassVar[list[str]] = []
    entered: ClassVar[asyncio.Event]
    release: ClassVar[asyncio.Event]

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        channel = cls()
        channel.account = account
        return channel

    async def start(self, sink: InboundSink) -> None:
        self.log.append("started")

    async def stop(self) -> None:
        self.log.append("stopped")

    def render(self, text: str) -> list[Chunk]:
        return [Chunk(text=text, plain=text)]

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        assert "stopped" not in self.log, "a send through a stopped channel"
        self.entered.set()
        await self.release.wait()
        self.log.append("sent")
        return "platform-1"


async def test_a_send_in_flight_finishes_before_its_channel_stops(
        tmp_path: Path, valkey: Valkey, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CHANNEL_REGISTRY, "gated", f"{__name__}:GatedChannel")
    GatedChannel.log = []
    GatedChannel.entered, GatedChannel.release = asyncio.Event(), asyncio.Event()
    stack = Stack(tmp_path, valkey, "\n[channels.gated]\n")
    try:
        gw = await stack.start_gateway()
        reply = Outbound(channel="gated", chat_id="c1", text="hello", reply_id="r1")
        stack.r.xadd(Keys().outbox, events.reply(reply).fields())  # type: ignore[arg-type]
        await asyncio.wait_for(GatedChannel.entered.wait(), 30)
        stopping = asyncio.create_task(gw.stop())
        await asyncio.sleep(0.5)  # the gateway is stopping while the send is in flight
        assert GatedChannel.log == ["started"]
        GatedChannel.release.set()
        await asyncio.wait_for(stopping, 30)
        assert GatedChannel.log == ["started", "sent", "stopped"]
        stack.gateway = None
    finally:
        await stack.close()

"""End to end: fake signal-cli -> SignalChannel (events stream) -> gateway inbox (real
Valkey) -> a real worker process (scripted model) -> outbox -> SignalChannel.send_chunk
(JSON-RPC send with quote) -> fake signal-cli; with a gateway restart in between that
loses and doubles nothing, and the channel's state in /healthz."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.models import Outbound
from tests.channels.e2e import GatewayStack, free_port, running
from tests.channels.harness_signal import GROUP_ID, env, new_fake
from tests.channels.kit import eventually
from tests.fakes.signal_cli import BOT_NUMBER, BOT_UUID, FakeSignalCli, data_message

ALICE = "a11ce000-0000-4000-8000-000000000002"
T0 = 1_700_000_200_000

pytestmark = pytest.mark.slow


class Stack(GatewayStack):
    def __init__(self, fake: FakeSignalCli) -> None:
        super().__init__(env(), "signal-e2e")
        self.fake = fake

    async def started(self) -> None:
        await self.fake.wait_subscribers(1)

    def quoted(self) -> list[int]:
        return [s["quoteTimestamp"] for s in self.fake.sent]

    async def replies(self, count: int) -> None:
        async def enough() -> bool:
            return len(self.fake.sent) >= count

        await eventually(enough, timeout=90)


@pytest.fixture
async def stack(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stack]:
    mode: str = getattr(request, "param", "on-connection")
    fake = new_fake(mode)
    await fake.start()
    tables = f"""
[http]
enabled = true
port = {free_port()}
[channels.signal]
url = "{fake.base_url}"
number = "{BOT_NUMBER}"
uuid = "{BOT_UUID}"
receive_mode = "{mode}"
auth_env = "SIGNAL_PROXY_AUTH"
idle_timeout = 5
backoff_initial = 0.05
backoff_max = 0.5
"""
    try:
        async with running(Stack(fake), tmp_path, tables) as s:
            yield s
    finally:
        await fake.stop()


async def test_group_mention_is_answered_quoting_the_trigger(stack: Stack) -> None:
    await stack.fake.receive(data_message("we ship on Friday", timestamp=T0, group_id=GROUP_ID))
    mention = {"name": BOT_NUMBER, "number": BOT_NUMBER, "uuid": BOT_UUID, "start": 0,
               "length": 1}
    await stack.fake.receive(data_message("\ufffc when?", timestamp=T0 + 1, group_id=GROUP_ID,
                                          number="+15550003000", name="Bob",
                                          uuid="b0b00000-0000-4000-8000-000000000003",
                                          mentions=[mention]))
    await stack.replies(1)
    [reply] = stack.fake.sent
    assert reply["groupId"] == GROUP_ID
    assert reply["quoteAuthor"] == "b0b00000-0000-4000-8000-000000000003"
    assert reply["quoteTimestamp"] == T0 + 1
    # the scripted model acks the ids it saw: the context message and the mention
    assert f"{ALICE}:{T0}" in reply["message"] and f":{T0 + 1}" in reply["message"]
    assert {"groupId": GROUP_ID} in stack.fake.typing


async def _healthz(stack: Stack) -> dict[str, Any]:
    assert stack.gateway is not None and stack.gateway.web_port is not None
    async with aiohttp.ClientSession() as session, session.get(
        f"http://127.0.0.1:{stack.gateway.web_port}/healthz"
    ) as resp:
        body: dict[str, Any] = await resp.json()
        return body


async def test_gateway_restart_loses_and_doubles_nothing(stack: Stack) -> None:
    await stack.fake.receive(data_message("one", timestamp=T0))
    await stack.replies(1)
    await stack.stop_gateway()

    async def gone() -> bool:  # the fake sees the closed connection a moment later
        return stack.fake.subscribers == 0

    await eventually(gone, timeout=10)
    # while the gateway is away: a new message, and Signal redelivering the first one
    await stack.fake.receive(data_message("two", timestamp=T0 + 1))
    await stack.fake.receive(data_message("one", timestamp=T0))
    await stack.start_gateway()
    await stack.replies(2)
    await stack.fake.receive(data_message("three", timestamp=T0 + 2))

    async def three_answered() -> bool:
        return T0 + 2 in stack.quoted()

    await eventually(three_answered, timeout=90)
    assert stack.quoted() == [T0, T0 + 1, T0 + 2]
    assert all(s["recipient"] == [ALICE] for s in stack.fake.sent)
    health = await _healthz(stack)
    status = health["channel_status"]["signal:default"]
    assert status["state"] == "ok" and status["stream"] == "connected"
    assert status["gaps"] == 0 and status["receive_mode"] == "on-connection"


async def test_a_reply_is_sent_once_per_reply_id(stack: Stack) -> None:
    assert stack.gateway is not None and stack.gateway.outbox is not None
    channel = stack.gateway.channels[("signal", "default")]
    reply = Outbound(channel="signal", chat_id=ALICE, text="**done**\n\n" + "word " * 500,
                     reply_id="turn-x:0")
    assert await stack.gateway.outbox.deliver(channel, reply)
    chunks = len(stack.fake.sent)
    assert chunks >= 2 and stack.fake.sent[0]["textStyle"] == ["0:4:BOLD"]
    assert await stack.gateway.outbox.deliver(channel, reply)  # a retried turn
    assert len(stack.fake.sent) == chunks


@pytest.mark.parametrize("stack", ["on-start"], indirect=True)
async def test_a_daemon_restart_that_lost_a_message_shows_in_healthz(stack: Stack) -> None:
    await stack.fake.receive(data_message("one", timestamp=T0))
    await stack.replies(1)
    await stack.fake.stop()
    await stack.fake.receive(data_message("lost", timestamp=T0 + 1))
    await stack.fake.start()  # receives "lost" with nobody listening: dropped
    assert len(stack.fake.dropped) == 1
    await stack.fake.wait_subscribers(1)
    await stack.fake.receive(data_message("three", timestamp=T0 + 2))

    async def three_answered() -> bool:
        return T0 + 2 in stack.quoted()

    await eventually(three_answered, timeout=90)
    assert stack.quoted() == [T0, T0 + 2]
    status = (await _healthz(stack))["channel_status"]["signal:default"]
    assert status["gaps"] == 1 and status["last_gap"]["from"] <= status["last_gap"]["to"]
    assert status["receive_mode"] == "on-start"

"""Socket Mode end to end: Bolt's AsyncSocketModeHandler (the real slack_sdk client
underneath) against the local fake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from channels.errors import PermanentError
from channels.models import Inbound, Outbound
from channels.slack import SlackChannel
from tests.fakes.slack_api import (
    BOT_USER_ID,
    FakeSlack,
    channel_block,
    channel_env,
    message_event,
)


class GatedSink:
    """A sink that holds each message until the test releases it (or makes it fail)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.fail = False
        self.got: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> None:
        self.entered.set()
        await self.release.wait()
        if self.fail:
            raise ConnectionError("redis down")
        self.got.append(inbound)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    server = FakeSlack()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def started(fake: FakeSlack) -> AsyncIterator[tuple[SlackChannel, GatedSink]]:
    sink = GatedSink()
    channel = SlackChannel.from_config("default", channel_block(fake), channel_env())
    await channel.start(sink)
    await fake.wait_connected()
    yield channel, sink
    await channel.stop()


async def test_event_is_acked_only_after_the_sink_returned(
    fake: FakeSlack, started: tuple[SlackChannel, GatedSink]
) -> None:
    channel, sink = started
    assert channel.bot_user_id == BOT_USER_ID  # learned with auth.test
    event = message_event(
        f"<@{BOT_USER_ID}> summarize the thread",
        ts="1700000010.000100",
        thread_ts="1700000009.000100",
        user_profile={"display_name": "Bob", "real_name": "Bob B"},
    )
    envelope = await fake.push_event(event)
    await asyncio.wait_for(sink.entered.wait(), 10)
    # The sink has the message but has not returned: no ack may have been sent.
    await asyncio.sleep(0.2)
    assert envelope not in fake.acks
    sink.release.set()
    await fake.wait_ack(envelope)
    assert len(sink.got) == 1
    inbound = sink.got[0]
    assert inbound.thread_id == "1700000009.000100"
    assert inbound.reply_to_id == "1700000009.000100"
    assert inbound.sender_name == "Bob"
    assert inbound.mentions_bot


async def test_mention_in_channel_gets_a_threaded_mrkdwn_reply(
    fake: FakeSlack, started: tuple[SlackChannel, GatedSink]
) -> None:
    """The adapter's two halves: a mention arrives, the reply the gateway would build
    from it lands at the fake in the thread of the triggering message."""
    channel, sink = started
    sink.release.set()
    envelope = await fake.push_event(
        message_event(f"<@{BOT_USER_ID}> list the steps", ts="1700000012.000100")
    )
    await fake.wait_ack(envelope)
    inbound = sink.got[0]
    assert inbound.mentions_bot and inbound.thread_id is None
    out = Outbound(channel="slack", chat_id=inbound.chat_id, thread_id=inbound.thread_id,
                   reply_to_id=inbound.message_id, reply_id="t1",
                   text="## Steps\n\n1. **fetch**\n2. `build`")
    for i, chunk in enumerate(channel.render(out.text)):
        await channel.send_chunk(out, chunk, i)
    assert len(fake.posted) == 1
    post = fake.posted[0]
    assert post["channel"] == "C0GENERAL1" and post["thread_ts"] == "1700000012.000100"
    assert post["blocks"][0]["text"]["text"] == "*Steps*\n\n1. *fetch*\n2. `build`"


async def test_sink_failure_means_no_ack(
    fake: FakeSlack, started: tuple[SlackChannel, GatedSink]
) -> None:
    _, sink = started
    sink.fail = True
    sink.release.set()
    envelope = await fake.push_event(message_event("hello", ts="1700000011.000100"))
    await asyncio.wait_for(sink.entered.wait(), 10)
    with pytest.raises(TimeoutError):
        await fake.wait_ack(envelope, timeout=1.0)
    assert sink.got == []
    # Slack redelivers the unacked envelope; with Redis back it goes through and is acked.
    sink.fail = False
    retry = await fake.push_event(message_event("hello", ts="1700000011.000100"),
                                  retry_attempt=1)
    await fake.wait_ack(retry)
    assert [i.message_id for i in sink.got] == ["1700000011.000100"]


async def test_ignored_events_are_acked_without_the_sink(
    fake: FakeSlack, started: tuple[SlackChannel, GatedSink]
) -> None:
    _, sink = started
    own = message_event("my own reply", user=BOT_USER_ID, bot_id="B0BOT0001")
    envelope = await fake.push_event(own)
    await fake.wait_ack(envelope)
    assert not sink.entered.is_set()


async def test_malformed_event_is_logged_and_acked_without_the_sink(
    fake: FakeSlack, started: tuple[SlackChannel, GatedSink], caplog: pytest.LogCaptureFixture
) -> None:
    _, sink = started
    broken = message_event("no user")
    del broken["user"]
    envelope = await fake.push_event(broken)
    await fake.wait_ack(envelope)
    assert not sink.entered.is_set()
    assert any("malformed event" in r.getMessage() for r in caplog.records)


async def test_refused_app_token_fails_start_with_permanent_error(fake: FakeSlack) -> None:
    env = dict(channel_env(), SLACK_APP_TOKEN="xapp-1-revoked")
    channel = SlackChannel.from_config("default", channel_block(fake), env)
    with pytest.raises(PermanentError) as info:
        await channel.start(GatedSink())
    assert info.value.reason == "invalid_auth"
    assert "xapp-1-revoked" not in str(info.value)
    assert fake.connections == 0


async def _reconnects_and_still_delivers(fake: FakeSlack, sink: GatedSink) -> None:
    await fake.wait_connected(count=2, timeout=20)
    sink.release.set()
    # events pushed on the new socket still flow and are acked
    envelope = await fake.push_event(message_event("after reconnect", ts="1700000020.000100"))
    await fake.wait_ack(envelope)
    assert [i.text for i in sink.got] == ["after reconnect"]


async def test_reconnects_after_the_server_drops_the_socket(
    fake: FakeSlack, started: tuple[SlackChannel, GatedSink]
) -> None:
    _, sink = started
    await fake.drop_connections()
    await _reconnects_and_still_delivers(fake, sink)
    # a fresh URL was fetched for the new connection
    assert [m for m, _ in fake.calls].count("apps.connections.open") >= 2


async def test_reconnects_on_slack_disconnect_message(
    fake: FakeSlack, started: tuple[SlackChannel, GatedSink]
) -> None:
    _, sink = started
    await fake.send_disconnect()
    await _reconnects_and_still_delivers(fake, sink)


async def test_stalled_socket_is_noticed_and_replaced() -> None:
    """The liveness watchdog: pings that get no pong mark the socket stale."""
    fake = FakeSlack(answer_pings=False)
    await fake.start()
    sink = GatedSink()
    channel = SlackChannel.from_config(
        "default", channel_block(fake, ping_interval=0.5), channel_env()
    )
    try:
        await channel.start(sink)
        await fake.wait_connected()
        fake.answer_pings = True  # the replacement connection is healthy
        await _reconnects_and_still_delivers(fake, sink)
    finally:
        await channel.stop()
        await fake.stop()

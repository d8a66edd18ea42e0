"""Slack HTTP Events API route: signatures, challenge, durability, dedupe."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels.models import Inbound
from channels.slack import SlackChannel
from tests.fakes.slack_api import (
    BOT_USER_ID,
    FakeSlack,
    channel_block,
    channel_env,
    event_callback,
    message_event,
    signed_headers,
)


class Sink:
    def __init__(self) -> None:
        self.got: list[Inbound] = []
        self.fail = False

    async def __call__(self, inbound: Inbound) -> None:
        if self.fail:
            raise ConnectionError("redis down")
        self.got.append(inbound)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    server = FakeSlack(users={"U0ALICE01": {"id": "U0ALICE01", "name": "alice",
                                            "profile": {"display_name": "Alice"}}})
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
async def client(fake: FakeSlack, sink: Sink) -> AsyncIterator[TestClient[Any, Any]]:
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    await channel.start(sink)
    app = web.Application()
    app.add_routes(channel.web_routes())
    async with TestClient(TestServer(app)) as test_client:
        yield test_client
    await channel.stop()


async def post(client: TestClient[Any, Any], payload: Any, **sign: Any) -> Any:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return await client.post("/slack/events", data=body, headers=signed_headers(body, **sign))


async def test_signed_event_reaches_sink_before_200(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    event = message_event(f"<@{BOT_USER_ID}> hello there", ts="1700000001.000200")
    response = await post(client, event_callback(event))
    assert response.status == 200
    assert len(sink.got) == 1
    inbound = sink.got[0]
    assert inbound.channel == "slack"
    assert inbound.chat_id == "C0GENERAL1"
    assert inbound.message_id == "1700000001.000200"
    assert inbound.mentions_bot is True
    assert inbound.text == "@claw hello there"
    assert inbound.sender_name == "Alice"  # users.info at the fake
    assert inbound.is_group is True


async def test_bad_signature_is_401_and_never_reaches_sink(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    response = await post(client, event_callback(message_event("hi")), secret="wrong-secret")
    assert response.status == 401
    assert sink.got == []


async def test_missing_signature_headers_is_401(client: TestClient[Any, Any], sink: Sink) -> None:
    body = json.dumps(event_callback(message_event("hi"))).encode()
    response = await client.post("/slack/events", data=body)
    assert response.status == 401
    headers = signed_headers(body)
    headers["X-Slack-Request-Timestamp"] = "not-a-number"
    response = await client.post("/slack/events", data=body, headers=headers)
    assert response.status == 401
    assert sink.got == []


async def test_stale_timestamp_is_401_even_when_correctly_signed(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    stale = int(time.time()) - 6 * 60
    response = await post(client, event_callback(message_event("hi")), timestamp=stale)
    assert response.status == 401
    future = int(time.time()) + 6 * 60
    response = await post(client, event_callback(message_event("hi")), timestamp=future)
    assert response.status == 401
    assert sink.got == []


async def test_timestamp_inside_window_is_accepted(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    response = await post(client, event_callback(message_event("hi")),
                          timestamp=int(time.time()) - 4 * 60)
    assert response.status == 200
    assert len(sink.got) == 1


async def test_tampered_body_is_401(client: TestClient[Any, Any], sink: Sink) -> None:
    body = json.dumps(event_callback(message_event("hi"))).encode()
    headers = signed_headers(body)
    tampered = body.replace(b"hi", b"ho")
    response = await client.post("/slack/events", data=tampered, headers=headers)
    assert response.status == 401
    assert sink.got == []


async def test_url_verification_echoes_challenge(client: TestClient[Any, Any], sink: Sink) -> None:
    payload = {"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
               "type": "url_verification"}
    response = await post(client, payload)
    assert response.status == 200
    assert await response.json() == {"challenge": payload["challenge"]}
    assert sink.got == []


async def test_url_verification_must_be_signed(client: TestClient[Any, Any]) -> None:
    payload = {"challenge": "abc", "type": "url_verification"}
    response = await post(client, payload, secret="nope")
    assert response.status == 401


async def test_malformed_json_is_400_with_a_log_line(
    client: TestClient[Any, Any], sink: Sink, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.slack")
    response = await post(client, b"{not json")
    assert response.status == 400
    assert any("malformed JSON" in r.getMessage() for r in caplog.records)
    response = await post(client, b"[1, 2]")
    assert response.status == 400
    assert sink.got == []


async def test_malformed_event_is_400_with_a_log_line(
    client: TestClient[Any, Any], sink: Sink, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.slack")
    no_event = {"type": "event_callback", "event_id": "Ev0BAD0001", "event": "oops"}
    assert (await post(client, no_event)).status == 400
    no_ts = message_event("hi")
    del no_ts["ts"]
    assert (await post(client, event_callback(no_ts))).status == 400
    assert sum("malformed event" in r.getMessage() for r in caplog.records) == 2
    assert sink.got == []


async def test_sink_failure_answers_5xx_so_slack_retries(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    payload = event_callback(message_event("hi", ts="1700000002.000100"), "Ev0RETRY01")
    sink.fail = True
    response = await post(client, payload)
    assert response.status == 503
    # Slack's retry of the same event_id must go through once Redis is back.
    sink.fail = False
    response = await post(client, payload)
    assert response.status == 200
    assert [i.message_id for i in sink.got] == ["1700000002.000100"]


async def test_redelivered_event_id_is_acked_without_second_sink_call(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    payload = event_callback(message_event("hi"), "Ev0SAME0001")
    assert (await post(client, payload)).status == 200
    assert (await post(client, payload)).status == 200
    assert len(sink.got) == 1


async def test_message_and_app_mention_share_one_dedupe_id(
    client: TestClient[Any, Any], sink: Sink, fake: FakeSlack
) -> None:
    text = f"<@{BOT_USER_ID}> what's up?"
    ts = "1700000003.000300"
    as_message = message_event(text, ts=ts)
    as_mention = message_event(text, ts=ts, kind="app_mention")
    assert (await post(client, event_callback(as_message, "Ev0MSG0001"))).status == 200
    assert (await post(client, event_callback(as_mention, "Ev0MEN0001"))).status == 200
    # The adapter skips the second delivery itself; the gateway would also dedupe it,
    # since both normalize to the same dedupe id.
    assert len(sink.got) == 1
    channel = SlackChannel.from_config(
        "default", channel_block(fake, "http", bot_user_id=BOT_USER_ID), channel_env()
    )
    first = await channel.normalize(as_message)
    second = await channel.normalize(as_mention)
    assert first is not None and second is not None
    assert first.dedupe_id == second.dedupe_id == sink.got[0].dedupe_id
    assert first.model_dump(exclude={"raw"}) == second.model_dump(exclude={"raw"})


async def test_ignored_subtypes_are_acked_and_not_sunk(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    edited = {"type": "message", "subtype": "message_changed", "channel": "C0GENERAL1",
              "ts": "1700000004.000100", "hidden": True,
              "message": {"type": "message", "user": "U0ALICE01", "text": "edited",
                          "ts": "1700000003.000100"},
              # the text did not change: a link unfurl, not an edit
              "previous_message": {"type": "message", "user": "U0ALICE01", "text": "edited",
                                   "ts": "1700000003.000100"}}
    bot = message_event("beep", subtype="bot_message", bot_id="B0OTHER01")
    for event in (edited, bot):
        assert (await post(client, event_callback(event))).status == 200
    assert sink.got == []


async def test_route_before_start_answers_503(fake: FakeSlack) -> None:
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    app = web.Application()
    app.add_routes(channel.web_routes())
    async with TestClient(TestServer(app)) as test_client:
        response = await post(test_client, event_callback(message_event("hi")))
        assert response.status == 503

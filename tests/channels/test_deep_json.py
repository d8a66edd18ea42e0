"""A 100,000-deep JSON array on every JSON entry point: 400 (or skipped) with a log
line, never a 500 or a crashed loop. Python's JSON parser raises ``RecursionError``
on it, which ``except ValueError`` does not catch."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels.base import Channel, Chunk, InboundSink
from channels.discord.transport import _retry_after
from channels.local import LocalChannel
from channels.models import Outbound, trim_raw
from channels.slack import SlackChannel
from channels.telegram.webhook import SECRET_HEADER
from gateway.intake import build_app
from tests.channels.harness_telegram import WEBHOOK_SECRET, telegram_harness
from tests.fakes.slack_api import FakeSlack, channel_block, channel_env, signed_headers

DEEP = b"[" * 100_000 + b"]" * 100_000


def test_the_payload_really_is_too_deep_for_the_json_module() -> None:
    with pytest.raises(RecursionError):
        json.loads(DEEP)


async def healthy() -> dict[str, Any]:
    return {"up": True, "ok": True, "degraded": []}


class NaiveChannel(Channel):
    """A route that parses JSON with no guard of its own: the gateway's net must hold."""

    name = "naive"

    async def start(self, sink: InboundSink) -> None: ...

    async def stop(self) -> None: ...

    def render(self, text: str) -> list[Chunk]:
        return []

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        return ""

    def web_routes(self) -> list[web.RouteDef]:
        async def hook(request: web.Request) -> web.Response:
            json.loads(await request.read())
            return web.Response(status=200)

        return [web.post("/naive/hook", hook)]


@pytest.fixture
async def slack() -> AsyncIterator[SlackChannel]:
    fake = FakeSlack()
    await fake.start()
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())

    async def sink(_: Any) -> None:
        raise AssertionError("a deep body must never reach the sink")

    await channel.start(sink)
    yield channel
    await channel.stop()
    await fake.stop()


async def test_every_gateway_route_answers_400_with_a_log_line(
    slack: SlackChannel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    app = build_app([slack, NaiveChannel()], healthy)
    async with TestClient(TestServer(app)) as client:
        response = await client.post("/slack/events", data=DEEP, headers=signed_headers(DEEP))
        assert response.status == 400
        response = await client.post("/naive/hook", data=DEEP)
        assert response.status == 400
        # the gateway's own route takes no body: a deep one is refused, not a crash
        response = await client.post("/healthz", data=DEEP)
        assert response.status == 405
        response = await client.get("/healthz")
        assert response.status == 200
    # Slack's adapter (on Bolt) rejects it itself with its own line; the gateway's net
    # catches the route that does not
    slack_lines = [r.getMessage() for r in caplog.records if r.name == "channels.slack.webhook"]
    assert any("malformed JSON body (400): RecursionError" in line for line in slack_lines)
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.intake._webhooks"]
    assert any("/naive/hook" in line and "nested too deeply" in line for line in lines)


async def test_telegram_webhook_answers_400_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.telegram.webhook")
    async with telegram_harness("webhook") as harness:
        assert harness.fake.webhook is not None
        url = harness.fake.webhook["url"]
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=DEEP, headers={SECRET_HEADER: WEBHOOK_SECRET}) as response,
        ):
            assert response.status == 400
        assert harness.sink.calls == 0
    assert any("malformed update (RecursionError" in r.getMessage() for r in caplog.records)


async def test_local_channel_skips_a_deep_message_and_keeps_receiving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.local")
    channel = LocalChannel("redis://127.0.0.1:1")
    with pytest.raises(ValueError, match="malformed local message"):
        channel.normalize(DEEP)
    wrapped = json.dumps({"chat_id": "c", "sender_id": "u", "message_id": "m", "text": "x"})
    deep_field = wrapped[:-1] + ', "extra": ' + DEEP.decode() + "}"
    with pytest.raises(ValueError, match="malformed local message"):
        channel.normalize(deep_field)
    assert channel.normalize(wrapped).text == "x"  # a sound message still goes through


def test_trim_raw_keeps_a_marker_for_a_payload_too_deep_to_encode() -> None:
    nested: list[Any] = []
    for _ in range(5000):
        nested = [nested]
    assert trim_raw({"a": nested}) == {"_unserializable": True}
    assert trim_raw({"a": [1]}) == {"a": [1]}


async def test_discord_429_with_a_deep_body_falls_back_to_the_headers() -> None:
    async def limited(request: web.Request) -> web.Response:
        return web.Response(status=429, body=DEEP, headers={"Retry-After": "2.5"})

    app = web.Application()
    app.router.add_get("/x", limited)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/x")
        assert await _retry_after(response) == (2.5, False)

"""Slack slash commands through the real Bolt app and Socket Mode client, and the app
manifest kept in sync with the command table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import channels.slack
from channels.models import Inbound
from channels.slack import SlackChannel
from gateway.intake import COMMANDS, parse_command
from tests.fakes.slack_api import FakeSlack, channel_block, channel_env, signed_headers

MANIFEST = Path(channels.slack.__file__).parent / "app_manifest.yml"


class Sink:
    def __init__(self) -> None:
        self.got: list[Inbound] = []
        self.fail = False

    async def __call__(self, inbound: Inbound) -> None:
        if self.fail:
            raise ConnectionError("redis down")
        self.got.append(inbound)


def slash(text: str, channel: str = "C0GENERAL1", trigger: str = "1337.42.abc") -> dict[str, Any]:
    """A slash command payload as Slack documents it (docs: interactivity/slash-commands)."""
    return {"token": "deprecated-verification-token", "team_id": "T0TEAM001",
            "team_domain": "claw", "channel_id": channel, "channel_name": "general",
            "user_id": "U0ALICE01", "user_name": "alice", "command": "/claw", "text": text,
            "api_app_id": "A0APP0001", "is_enterprise_install": "false",
            "response_url": "https://hooks.slack.com/commands/T0TEAM001/1/secret",
            "trigger_id": trigger}


@pytest.fixture
async def started() -> AsyncIterator[tuple[FakeSlack, Sink]]:
    fake = FakeSlack(users={"U0ALICE01": {"id": "U0ALICE01", "name": "alice"}})
    await fake.start()
    sink = Sink()
    channel = SlackChannel.from_config("default", channel_block(fake), channel_env())
    await channel.start(sink)
    try:
        await fake.wait_connected()
        yield fake, sink
    finally:
        await channel.stop()
        await fake.stop()


async def test_slash_command_becomes_a_command_inbound_and_is_acked(
    started: tuple[FakeSlack, Sink],
) -> None:
    fake, sink = started
    envelope = await fake.push_envelope("slash_commands", slash("Forget everything"))
    await fake.wait_ack(envelope)
    [got] = sink.got
    assert (got.command, got.text, got.chat_id, got.is_group) == (
        "forget", "/forget everything", "C0GENERAL1", True)
    assert got.message_id == "1337.42.abc" and got.sender_id == "U0ALICE01"
    assert "response_url" not in got.raw and "token" not in got.raw
    parsed = parse_command(got)
    assert parsed is not None and (parsed.name, parsed.args) == ("forget", "everything")


async def test_bare_slash_command_in_a_dm_asks_for_help(started: tuple[FakeSlack, Sink]) -> None:
    fake, sink = started
    await fake.wait_ack(await fake.push_envelope("slash_commands", slash("", "D0ALICEDM1")))
    [got] = sink.got
    assert (got.command, got.text, got.is_group) == ("help", "/help", False)


async def test_slash_command_not_durable_is_not_acked(started: tuple[FakeSlack, Sink]) -> None:
    fake, sink = started
    sink.fail = True
    envelope = await fake.push_envelope("slash_commands", slash("status"))
    with pytest.raises(TimeoutError):
        await fake.wait_ack(envelope, timeout=1.5)
    assert sink.got == []
    sink.fail = False  # a later command still goes through on the same connection
    await fake.wait_ack(await fake.push_envelope("slash_commands", slash("status", trigger="2")))
    assert [m.command for m in sink.got] == ["status"]


async def test_slash_command_over_http_is_signed_form_data() -> None:
    from urllib.parse import urlencode

    fake = FakeSlack(users={"U0ALICE01": {"id": "U0ALICE01", "name": "alice"}})
    await fake.start()
    sink = Sink()
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    await channel.start(sink)
    app = web.Application()
    app.add_routes(channel.web_routes())
    try:
        async with TestClient(TestServer(app)) as client:
            body = urlencode(slash("whoami")).encode()
            headers = {**signed_headers(body),
                       "Content-Type": "application/x-www-form-urlencoded"}
            response = await client.post("/slack/events", data=body, headers=headers)
            assert response.status == 200
            forged = await client.post("/slack/events", data=body, headers={
                **headers, "X-Slack-Signature": "v0=" + "0" * 64})
            assert forged.status == 401
    finally:
        await channel.stop()
        await fake.stop()
    assert [m.command for m in sink.got] == ["whoami"]


def test_manifest_slash_command_lists_every_chat_command() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    [claw] = manifest["features"]["slash_commands"]
    assert claw["command"] == "/claw"
    assert claw["usage_hint"] == " | ".join(COMMANDS)
    assert "commands" in manifest["oauth_config"]["scopes"]["bot"]


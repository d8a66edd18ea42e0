"""Gateway life cycle: IDENTIFY, config, failures at start, reconnects, token hygiene."""

from __future__ import annotations

import logging

import pydantic
import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route

from channels.base import Chunk
from channels.discord import DiscordChannel, DiscordSettings
from channels.errors import PermanentError
from channels.models import Outbound
from tests.channels.harness_discord import TOKEN, DiscordRig, wait_until
from tests.fakes.discord_api import (
    INTENT_DIRECT_MESSAGES,
    INTENT_GUILD_MESSAGES,
    INTENT_GUILDS,
    INTENT_MESSAGE_CONTENT,
)

GUILD_MEMBERS, GUILD_PRESENCES = 1 << 1, 1 << 8


async def test_identify_sends_token_and_message_content_intent() -> None:
    async with DiscordRig() as rig:
        [identify] = rig.fake.identifies
        assert identify["token"] == TOKEN
        intents = identify["intents"]
        for bit in (INTENT_GUILDS, INTENT_GUILD_MESSAGES, INTENT_DIRECT_MESSAGES,
                    INTENT_MESSAGE_CONTENT):
            assert intents & bit
        # no privileged intent beyond the one the adapter needs
        assert not intents & (GUILD_MEMBERS | GUILD_PRESENCES)
        assert all(h == f"Bot {TOKEN}" for h in rig.fake.auth_headers)
        assert ("GET", "/api/v10/gateway/bot") in rig.fake.requests


async def test_endpoints_are_restored_after_stop() -> None:
    default_rest, default_gw = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    async with DiscordRig() as rig:
        assert f"{rig.fake.base_url}/api/v10" == Route.BASE
        assert str(DiscordWebSocket.DEFAULT_GATEWAY) == rig.fake.gateway_url
    assert (default_rest, default_gw) == (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)


async def test_message_content_intent_not_enabled_is_a_clear_permanent_error() -> None:
    async with DiscordRig(start=False, message_content_enabled=False) as rig:
        channel = rig.make_channel()
        with pytest.raises(PermanentError) as err:
            await channel.start(rig.sink)
        assert err.value.reason == "disallowed_intents"
        assert "MESSAGE CONTENT INTENT" in str(err.value)
        await channel.stop()


async def test_rejected_token_is_a_clear_permanent_error_without_the_token() -> None:
    async with DiscordRig(start=False) as rig:
        channel = DiscordChannel.from_config(
            "default", {"api_base_url": rig.fake.base_url}, {"DISCORD_BOT_TOKEN": "wrong-tok"}
        )
        with pytest.raises(PermanentError) as err:
            await channel.start(rig.sink)
        assert err.value.reason == "unauthorized"
        assert "DISCORD_BOT_TOKEN" in str(err.value)
        assert "wrong-tok" not in str(err.value)
        await channel.stop()


def test_config_errors_name_the_key_and_the_fix() -> None:
    with pytest.raises(ValueError, match="DISCORD_BOT_TOKEN"):
        DiscordChannel.from_config("default", {}, {})
    with pytest.raises(ValueError, match="MY_TOKEN"):
        DiscordChannel.from_config("default", {"token_env": "MY_TOKEN"}, {})
    with pytest.raises(pydantic.ValidationError, match="tokn_env"):
        DiscordChannel.from_config("default", {"tokn_env": "X"}, {"DISCORD_BOT_TOKEN": "t"})
    with pytest.raises(pydantic.ValidationError, match="gateway_url"):
        DiscordSettings(gateway_url="ws://127.0.0.1:1/gateway")
    with pytest.raises(pydantic.ValidationError, match="max_ratelimit_timeout"):
        DiscordSettings(max_ratelimit_timeout=5)


def test_token_not_in_reprs() -> None:
    channel = DiscordChannel.from_config("work", {}, {"DISCORD_BOT_TOKEN": TOKEN})
    assert TOKEN not in repr(channel)
    assert TOKEN not in str(vars(channel))
    assert channel.account == "work"


async def test_token_never_in_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[str] = []
    async with DiscordRig() as rig:
        assert rig.channel is not None
        await rig.say(rig.general, "hi", mentions=[rig.mention()])
        got = await rig.next_inbound()
        msg = Outbound(channel="discord", chat_id=got.chat_id, text="yo", reply_id="r",
                       reply_to_id=got.message_id)
        await rig.channel.send_chunk(msg, Chunk("yo", "yo"), 0)
        rig.fake.fail_next("POST", rig.general["id"], 403,
                           {"message": "Missing Permissions", "code": 50013})
        try:
            await rig.channel.send_chunk(msg, Chunk("yo", "yo"), 0)
        except PermanentError as exc:
            errors.append(repr(exc))
        await rig.fake.drop_connections()
        await wait_until(lambda: len(rig.fake.resumes) == 1 and rig.fake.connected.is_set())
    # the token was really in use (IDENTIFY, RESUME, every REST call) ...
    assert rig.fake.identifies[0]["token"] == TOKEN
    assert rig.fake.resumes[0]["token"] == TOKEN
    assert len(caplog.records) > 20
    # ... and never reached a log line or an error
    assert TOKEN not in caplog.text
    assert errors and all(TOKEN not in e for e in errors)
    assert all(TOKEN not in repr(m) for m in rig.received)


async def test_dropped_connection_resumes_and_replays_missed_events() -> None:
    async with DiscordRig() as rig:
        session_id = rig.fake.identifies and next(iter(rig.fake._sessions))
        await rig.say(rig.general, "before")
        await rig.next_inbound(1)
        await rig.fake.drop_connections()
        # sent while the bot is disconnected: Discord replays it on RESUME
        missed = await rig.say(rig.general, "while away")
        await rig.next_inbound(2)
        [resume] = rig.fake.resumes
        assert resume["session_id"] == session_id
        assert len(rig.fake.identifies) == 1  # resumed, not re-identified
        after = await rig.say(rig.general, "after")
        await rig.next_inbound(3)
        assert [m.message_id for m in rig.received][1:] == [missed["id"], after["id"]]


async def test_replayed_event_keeps_its_dedupe_key() -> None:
    # the gateway may replay an event the bot already saw (resume from an older seq);
    # the adapter passes it on with the same message id, and the inbox dedupes it
    async with DiscordRig() as rig:
        msg = rig.fake.message_json(rig.general, rig.alice, "twice")
        await rig.fake.dispatch_message(msg)
        await rig.fake.dispatch_message(msg)
        await rig.next_inbound(2)
        first, second = rig.received
        assert first.dedupe_id == second.dedupe_id
        assert first.message_id == msg["id"]


async def test_refused_reconnect_backs_off_and_retries() -> None:
    async with DiscordRig() as rig:
        rig.fake.refuse_gateway = 2  # two failed handshakes before Discord is back
        await rig.fake.drop_connections()
        await wait_until(lambda: rig.fake.connected.is_set(), timeout=30)
        assert rig.fake.refuse_gateway == 0
        await rig.say(rig.general, "back")
        assert (await rig.next_inbound()).text == "back"


async def test_stalled_gateway_is_noticed_and_reconnected() -> None:
    # Heartbeat every 50 ms, no ACKs and no other frames: discord.py's watchdog
    # (heartbeat_timeout) declares the connection dead, closes it and resumes.
    rig = DiscordRig(heartbeat_interval_ms=50)
    rig.config = {"heartbeat_timeout": 0.5}
    async with rig:
        rig.fake.ack_heartbeats = False
        await wait_until(lambda: len(rig.fake.resumes) >= 1)
        rig.fake.ack_heartbeats = True
        await wait_until(lambda: rig.fake.connected.is_set())
        await rig.say(rig.general, "still here")
        assert (await rig.next_inbound()).text == "still here"


async def test_two_accounts_cannot_point_at_different_servers() -> None:
    async with DiscordRig() as rig:
        other = DiscordChannel.from_config(
            "second", {"api_base_url": "http://127.0.0.1:9"}, {"DISCORD_BOT_TOKEN": TOKEN}
        )
        with pytest.raises(ValueError, match="api_base_url"):
            await other.start(rig.sink)
        # the first account is untouched
        assert rig.channel is not None
        await rig.say(rig.general, "ok")
        assert (await rig.next_inbound()).text == "ok"


async def test_token_rejected_by_the_gateway_is_permanent() -> None:
    # REST login worked, then IDENTIFY is refused (close 4004): no reconnect loop
    async with DiscordRig(start=False) as rig:
        rig.fake.gateway_rejects_token = True
        channel = rig.make_channel()
        with pytest.raises(PermanentError) as err:
            await channel.start(rig.sink)
        assert err.value.reason == "unauthorized"
        assert TOKEN not in str(err.value)
        assert len(rig.fake.identifies) == 1
        await channel.stop()

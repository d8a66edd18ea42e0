"""``Channel.check()`` (what ``pynanoclaw status`` asks each channel) with the real SDKs
against the local fakes: an accepted token names the bot, a refused one raises
``PermanentError`` naming the variable where the adapter knows it, and the token never
appears in the error."""

from __future__ import annotations

import pytest

from channels.discord.channel import DiscordChannel
from channels.errors import PermanentError
from channels.slack import SlackChannel
from channels.whatsapp import WhatsAppChannel
from gateway.operations import credential_envs
from tests.channels.harness_discord import TOKEN as DISCORD_TOKEN
from tests.channels.harness_whatsapp import channel_block as wa_block
from tests.channels.harness_whatsapp import channel_env as wa_env
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.slack_api import FakeSlack, channel_block, channel_env
from tests.fakes.whatsapp_api import API_VERSION, PHONE_NUMBER_ID, FakeWhatsApp


async def test_discord_check_asks_users_me() -> None:
    fake = FakeDiscord(token=DISCORD_TOKEN)
    await fake.start()
    try:
        block = {"api_base_url": fake.base_url}
        good = DiscordChannel.from_config("default", block, {"DISCORD_BOT_TOKEN": DISCORD_TOKEN})
        assert (await good.check() or "").startswith("bot user ")
        wrong = "MTIzNDU2Nzg5.wrong-token.wrongwrongwrong"
        bad = DiscordChannel.from_config("default", block, {"DISCORD_BOT_TOKEN": wrong})
        with pytest.raises(PermanentError) as caught:
            await bad.check()
        assert "DISCORD_BOT_TOKEN" in str(caught.value) and wrong not in str(caught.value)
    finally:
        await fake.stop()


async def test_slack_check_asks_auth_test() -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        good = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
        assert await good.check()
        wrong = "xoxb-0000-wrong-token"
        bad = SlackChannel.from_config("default", channel_block(fake, "http"),
                                       {**channel_env(), "SLACK_BOT_TOKEN": wrong})
        with pytest.raises(PermanentError) as caught:
            await bad.check()
        assert wrong not in str(caught.value)
        assert credential_envs(bad)[0] == "SLACK_BOT_TOKEN"  # what status/healthz name
    finally:
        await fake.stop()


async def test_whatsapp_check_asks_for_the_phone_number_with_the_token() -> None:
    fake = FakeWhatsApp()
    await fake.start()
    try:
        good = WhatsAppChannel.from_config("default", wa_block(fake), wa_env())
        assert "+1 555-078-3881" in (await good.check() or "")
        wrong = "EAAwrongwrongwrong"
        bad = WhatsAppChannel.from_config("default", wa_block(fake),
                                          {**wa_env(), "WHATSAPP_TOKEN": wrong})
        with pytest.raises(PermanentError) as caught:
            await bad.check()
        assert wrong not in str(caught.value)
        unknown = WhatsAppChannel.from_config(
            "default", {**wa_block(fake), "phone_number_id": "999"}, wa_env())
        with pytest.raises(PermanentError):  # a token fine, a number it does not own
            await unknown.check()
        assert ("GET", f"/v{API_VERSION}/{PHONE_NUMBER_ID}") in fake.calls
    finally:
        await fake.stop()

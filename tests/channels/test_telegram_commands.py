"""Telegram's command registry and command forms, against the fake Bot API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from channels.errors import PermanentError
from gateway.app import register_commands
from gateway.intake import COMMANDS, registry_entries
from tests.channels.harness_telegram import TelegramHarness, telegram_harness
from tests.fakes.telegram_api import BOT_TOKEN, ApiFailure


@pytest.fixture
async def polling() -> AsyncIterator[TelegramHarness]:
    async with telegram_harness("polling") as harness:
        yield harness


async def test_set_my_commands_publishes_the_command_table(polling: TelegramHarness) -> None:
    await polling.channel.register_commands(registry_entries())
    assert [c["command"] for c in polling.fake.commands] == list(COMMANDS)
    assert polling.fake.commands[0]["description"] == COMMANDS["help"].summary


async def test_a_refused_registration_is_an_error_without_the_token(
    polling: TelegramHarness,
) -> None:
    polling.fake.fail_next("setMyCommands", ApiFailure(400, "Bad Request: BOT_COMMAND_INVALID"))
    with pytest.raises(PermanentError) as info:
        await polling.channel.register_commands([("Bad-Name", "x")])
    assert BOT_TOKEN not in repr(info.value) and BOT_TOKEN not in str(info.value)
    # the gateway logs it and carries on: the menu is a convenience, not a dependency
    polling.fake.fail_next("setMyCommands", ApiFailure(400, "Bad Request: BOT_COMMAND_INVALID"))
    await register_commands(polling.channel)
    assert polling.fake.commands == []


async def test_the_fake_enforces_telegram_command_rules(polling: TelegramHarness) -> None:
    with pytest.raises(PermanentError):
        await polling.channel.register_commands([("Help", "capitals are refused")])

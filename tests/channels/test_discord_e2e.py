"""End to end: fake Discord -> real discord.py -> gateway inbox (real Valkey) -> a real
worker process (scripted model) -> outbox -> DiscordChannel.send_chunk -> fake Discord.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.channels.e2e import GatewayStack, running
from tests.channels.harness_discord import TOKEN, DiscordRig, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
async def discord_stack(tmp_path: Path) -> AsyncIterator[DiscordRig]:
    async with DiscordRig(start=False) as rig:
        tables = f"""
[channels.discord]
api_base_url = "{rig.fake.base_url}"
"""
        async with running(GatewayStack({"DISCORD_BOT_TOKEN": TOKEN}, "discord-e2e"),
                           tmp_path, tables):
            yield rig


async def test_mention_in_a_thread_is_answered_in_the_thread(discord_stack: DiscordRig) -> None:
    rig = discord_stack
    context = await rig.say(rig.thread, "we ship on Friday")
    trigger = await rig.say(rig.thread, f"<@{rig.bot['id']}> when do we ship?",
                            mentions=[rig.mention()])
    await wait_until(lambda: len(rig.fake.sent) >= 1, timeout=90)
    [reply] = rig.fake.sent
    assert reply["channel_id"] == rig.thread["id"]
    assert reply["message_reference"]["message_id"] == trigger["id"]
    assert reply["request"]["allowed_mentions"] == {"parse": [], "replied_user": True}
    assert len(reply["content"]) <= 2000
    # the scripted model acks the ids it saw: the thread's context and the mention
    assert context["id"] in reply["content"] and trigger["id"] in reply["content"]
    # the turn showed "typing..." in the thread
    assert rig.thread["id"] in rig.fake.typing


async def test_unmentioned_group_message_gets_no_reply(discord_stack: DiscordRig) -> None:
    rig = discord_stack
    await rig.say(rig.general, "just chatting")
    trigger = await rig.say(rig.dm, "hi in private")  # DMs engage without a mention
    await wait_until(lambda: len(rig.fake.sent) >= 1, timeout=90)
    assert [s["channel_id"] for s in rig.fake.sent] == [rig.dm["id"]]
    assert rig.fake.sent[0]["message_reference"]["message_id"] == trigger["id"]

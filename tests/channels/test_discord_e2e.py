"""End to end: fake Discord -> real discord.py -> gateway inbox (real Valkey) -> a real
worker process (scripted model) -> outbox -> DiscordChannel.send_chunk -> fake Discord.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.channels.e2e import GatewayStack, running
from tests.channels.harness_discord import TOKEN, DiscordRig, wait_until
from tests.channels.redaction_check import files_holding, keys_holding, wait_redacted

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


async def test_a_deleted_message_leaves_memory_and_redis(tmp_path: Path) -> None:
    """Alice's DM is answered with a reply quoting part of it, then she deletes it
    (MESSAGE_DELETE): none of its words stays in any file of the data directory or any
    Redis key."""
    async with DiscordRig(start=False) as rig:
        tables = f'\n[channels.discord]\napi_base_url = "{rig.fake.base_url}"\n'
        async with running(GatewayStack({"DISCORD_BOT_TOKEN": TOKEN}, "discord-e2e"),
                           tmp_path, tables) as stack:
            said = await rig.say(rig.dm, "hello MARK-dc1, my locker combination "
                                         "echo[MARK-dc1 combination]")
            await wait_until(lambda: len(rig.fake.sent) >= 1, timeout=90)
            assert "SEEN: MARK-dc1 combination" in rig.fake.sent[0]["content"]
            data = tmp_path / "data"
            await wait_until(lambda: bool(files_holding(data, "MARK-dc1")), timeout=90)
            await rig.fake.dispatch("MESSAGE_DELETE", {"id": said["id"],
                                                       "channel_id": rig.dm["id"]})
            await wait_redacted(data)
            for word in ("MARK-dc1", "combination"):
                assert files_holding(data, word) == [], word
                assert keys_holding(stack.valkey_url, word) == set(), word

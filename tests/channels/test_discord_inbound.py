"""Discord gateway events -> Inbound, with the real discord.py client against the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.channels.harness_discord import DiscordRig, wait_until
from tests.fakes.discord_api import FakeDiscord, now_iso, snowflake, user_json


@pytest.fixture
async def rig() -> AsyncIterator[DiscordRig]:
    async with DiscordRig() as r:
        yield r


async def test_guild_message_mentioning_the_bot(rig: DiscordRig) -> None:
    msg = await rig.say(rig.general, f"<@{rig.bot['id']}> what's up?", mentions=[rig.mention()])
    got = await rig.next_inbound()
    assert got.channel == "discord"
    assert got.account == "default"
    assert got.chat_id == rig.general["id"]
    assert got.thread_id is None
    assert got.is_group is True
    assert got.chat_name == "#general"
    assert got.sender_id == rig.alice["id"]
    assert got.sender_name == "Alice"
    assert got.message_id == msg["id"]
    assert got.mentions_bot is True
    # mentions are shown as people see them, not as raw <@id> markup
    assert got.text == "@Clawbot what's up?"
    assert got.group == f"discord:{rig.general['id']}"
    assert got.is_admin is False


async def test_guild_message_without_mention_is_context(rig: DiscordRig) -> None:
    # the bot's id in the text is not a mention: only Discord's mention entities count
    await rig.say(rig.general, f"the bot is {rig.bot['id']}")
    got = await rig.next_inbound()
    assert got.mentions_bot is False
    assert got.is_group is True


async def test_mention_of_the_bots_managed_role(rig: DiscordRig) -> None:
    role = FakeDiscord.role(rig.guild, "clawbot")
    await rig.say(rig.general, f"<@&{role['id']}> help", mention_roles=[role["id"]])
    assert (await rig.next_inbound()).mentions_bot is True


async def test_mention_of_another_role_is_not_a_mention(rig: DiscordRig) -> None:
    role = FakeDiscord.role(rig.guild, "admins")
    await rig.say(rig.general, f"<@&{role['id']}> help", mention_roles=[role["id"]])
    assert (await rig.next_inbound()).mentions_bot is False


async def test_direct_message(rig: DiscordRig) -> None:
    msg = await rig.say(rig.dm, "hello in private")
    got = await rig.next_inbound()
    assert got.is_group is False
    assert got.chat_id == rig.dm["id"]
    assert got.thread_id is None
    assert got.text == "hello in private"
    assert got.message_id == msg["id"]


async def test_thread_maps_to_parent_channel(rig: DiscordRig) -> None:
    await rig.say(rig.thread, "in the thread", mentions=[rig.mention()])
    got = await rig.next_inbound()
    assert got.chat_id == rig.general["id"]
    assert got.thread_id == rig.thread["id"]
    assert got.chat_name == "#general"
    assert got.group == f"discord:{rig.general['id']}"


async def test_uncached_thread_is_resolved_once_through_rest(rig: DiscordRig) -> None:
    path = f"/api/v10/channels/{rig.hidden_thread['id']}"
    await rig.say(rig.hidden_thread, "first")
    await rig.say(rig.hidden_thread, "second")
    first = await rig.next_inbound(1)
    second = await rig.next_inbound(2)
    for got in (first, second):
        assert got.chat_id == rig.general["id"]
        assert got.thread_id == rig.hidden_thread["id"]
    assert rig.fake.requests.count(("GET", path)) == 1


async def test_reply_to_the_bot_engages_and_carries_quote(rig: DiscordRig) -> None:
    bots_msg = rig.fake.message_json(rig.general, rig.bot, "I answered **this**")
    reply = await rig.say(rig.general, "thanks, but why?", reply_to=bots_msg)
    got = await rig.next_inbound()
    assert got.message_id == reply["id"]
    assert got.reply_to_id == bots_msg["id"]
    assert got.reply_to_text == "I answered **this**"
    assert got.mentions_bot is True


async def test_reply_to_a_human_does_not_engage(rig: DiscordRig) -> None:
    bob = user_json(snowflake(), "bob")
    bobs = rig.fake.message_json(rig.general, bob, "lunch?")
    await rig.say(rig.general, "sure", reply_to=bobs)
    got = await rig.next_inbound()
    assert got.reply_to_id == bobs["id"]
    assert got.reply_to_text == "lunch?"
    assert got.mentions_bot is False


async def test_attachments_become_metadata(rig: DiscordRig) -> None:
    att = {
        "id": snowflake(),
        "filename": "plan.pdf",
        "size": 48213,
        "url": "https://cdn.discordapp.com/attachments/1/2/plan.pdf",
        "proxy_url": "https://media.discordapp.net/attachments/1/2/plan.pdf",
        "content_type": "application/pdf",
    }
    pic = {**att, "id": snowflake(), "filename": "cat.png", "content_type": "image/png",
           "width": 10, "height": 10}
    await rig.say(rig.general, "", attachments=[att, pic])
    got = await rig.next_inbound()
    assert [(a.id, a.type, a.name, a.size, a.mime, a.url) for a in got.attachments] == [
        (att["id"], "document", "plan.pdf", 48213, "application/pdf", att["url"]),
        (pic["id"], "image", "cat.png", 48213, "image/png", pic["url"]),
    ]


async def test_admin_flag_comes_from_guild_permissions(rig: DiscordRig) -> None:
    admins = FakeDiscord.role(rig.guild, "admins")
    member = {"roles": [admins["id"]], "joined_at": now_iso(), "deaf": False, "mute": False,
              "flags": 0, "nick": "Boss"}
    await rig.say(rig.general, "config change", member=member)
    got = await rig.next_inbound()
    assert got.is_admin is True
    assert got.sender_name == "Boss"  # the guild nickname is the display name


async def test_bots_and_system_messages_are_ignored_edits_and_deletes_kept(
    rig: DiscordRig,
) -> None:
    other_bot = user_json(snowflake(), "otherbot", bot=True)
    await rig.say(rig.general, "my own echo", author=rig.bot)
    await rig.say(rig.general, "beep", author=other_bot)
    join = rig.fake.message_json(rig.general, rig.alice, "")
    join["type"] = 7  # USER_JOIN system message
    await rig.fake.dispatch_message(join)
    original = await rig.say(rig.general, "typo")
    await rig.fake.dispatch("MESSAGE_UPDATE", {**original, "content": "fixed",
                                               "edited_timestamp": now_iso()})
    await rig.fake.dispatch("MESSAGE_DELETE", {"id": original["id"],
                                               "channel_id": rig.general["id"],
                                               "guild_id": rig.guild["id"]})
    # an update without edited_timestamp is Discord adding embeds, not an edit
    await rig.fake.dispatch("MESSAGE_UPDATE", {**original, "edited_timestamp": None})
    last = await rig.say(rig.general, "done")
    # events are handled in order, so once "done" arrived everything before it was seen
    await rig.next_inbound(4)
    assert [(m.kind, m.text) for m in rig.received] == [
        ("message", "typo"), ("edit", "fixed"), ("deletion", ""), ("message", "done")]
    assert rig.received[1].original_id == rig.received[2].original_id == original["id"]
    assert rig.received[2].sender_id == rig.received[0].sender_id  # cached: sender known
    assert rig.received[3].message_id == last["id"]


async def test_a_dm_deletion_of_an_uncached_message_asks_discord_nothing(
    rig: DiscordRig,
) -> None:
    gone = snowflake()  # sent before a restart: not in discord.py's cache
    await rig.fake.dispatch("MESSAGE_DELETE", {"id": gone, "channel_id": rig.dm["id"]})
    await rig.say(rig.general, "fence")
    await rig.next_inbound(2)
    deletion = rig.received[0]
    assert (deletion.kind, deletion.original_id) == ("deletion", gone)
    assert (deletion.chat_id, deletion.thread_id, deletion.is_group, deletion.chat_name) == (
        rig.dm["id"], None, False, None)
    # a DM is never a thread: no GET /channels/{id} to find out
    assert ("GET", f"/api/v10/channels/{rig.dm['id']}") not in rig.fake.requests


async def test_sink_failure_is_retried_in_order(rig: DiscordRig) -> None:
    rig.sink_failures = 3
    first = await rig.say(rig.general, "one")
    second = await rig.say(rig.general, "two")
    await rig.next_inbound(2)
    assert [m.message_id for m in rig.received] == [first["id"], second["id"]]
    assert rig.sink_calls == 5  # three failed tries of "one", then each once


async def test_stop_drains_queued_messages() -> None:
    async with DiscordRig() as rig:
        rig.sink_failures = 2
        await rig.say(rig.general, "almost lost")
        await wait_until(lambda: rig.sink_calls >= 1)
        assert rig.channel is not None
        await rig.channel.stop()
        assert [m.text for m in rig.received] == ["almost lost"]


async def test_thread_resolution_retries_transient_failures(rig: DiscordRig) -> None:
    tid = rig.hidden_thread["id"]
    rig.fake.fail_next("GET", tid, 500, {"message": "500: Internal Server Error", "code": 0},
                       route="")
    await rig.say(rig.hidden_thread, "after a hiccup")
    got = await rig.next_inbound()
    assert (got.chat_id, got.thread_id) == (rig.general["id"], tid)
    assert rig.fake.requests.count(("GET", f"/api/v10/channels/{tid}")) == 2


async def test_unresolvable_channel_keeps_the_message(rig: DiscordRig) -> None:
    tid = rig.hidden_thread["id"]
    rig.fake.fail_next("GET", tid, 403, {"message": "Missing Access", "code": 50001}, route="")
    msg = await rig.say(rig.hidden_thread, "still counts")
    got = await rig.next_inbound()
    # not lost: kept as a chat of its own (and not retried: 403 is permanent)
    assert (got.chat_id, got.thread_id, got.message_id) == (tid, None, msg["id"])
    assert rig.fake.requests.count(("GET", f"/api/v10/channels/{tid}")) == 1


async def test_full_buffer_drops_the_oldest_waiting_message() -> None:
    rig = DiscordRig()
    rig.config = {"inbound_buffer": 2}
    async with rig:
        rig.sink_failures = 10**6  # the inbox is down
        one = await rig.say(rig.general, "one")
        await wait_until(lambda: rig.sink_calls >= 1)  # "one" is being retried
        await rig.say(rig.general, "two")
        three = await rig.say(rig.general, "three")
        four = await rig.say(rig.general, "four")  # buffer holds two: "two" goes
        await wait_until(lambda: rig.sink_calls >= 3)
        rig.sink_failures = 0
        await rig.next_inbound(3)
        assert [m.message_id for m in rig.received] == [one["id"], three["id"], four["id"]]


async def test_stop_gives_up_on_an_unavailable_inbox(caplog: pytest.LogCaptureFixture) -> None:
    async with DiscordRig() as rig:
        assert rig.channel is not None
        rig.channel.stop_drain_timeout = 0.2
        rig.sink_failures = 10**6
        await rig.say(rig.general, "cannot be stored")
        await wait_until(lambda: rig.sink_calls >= 1)
        await rig.channel.stop()
        assert rig.received == []
        assert "not yet durable at stop were dropped" in caplog.text

"""Reading back what the gateway will never redeliver: restarts and unresumable
sessions, through per-channel marks in the cursor store and REST history."""

from __future__ import annotations

import pytest

from channels.discord.cursors import INDEX_KEY, LastSeen
from tests.channels.harness_discord import DiscordRig, wait_until
from tests.channels.kit import MemoryCursorStore


def history_reads(rig: DiscordRig, channel: dict[str, object]) -> int:
    path = f"/api/v10/channels/{channel['id']}/messages"
    return sum(1 for method, p in rig.fake.requests if method == "GET" and p == path)


async def test_restart_reads_back_messages_sent_while_away() -> None:
    store = MemoryCursorStore()
    async with DiscordRig(start=False) as rig:
        first = rig.make_channel()
        first.bind(store)
        await first.start(rig.sink)
        try:
            before = await rig.say(rig.general, "before the restart")
            in_thread = await rig.say(rig.thread, "thread talk")
            await rig.next_inbound(2)
            await wait_until(lambda: store.values.get(f"last:{rig.thread['id']}")
                             == in_thread["id"])
            assert history_reads(rig, rig.general) == 0  # nothing to read back yet
        finally:
            await first.stop()
        # posted while the bot was down: no gateway session saw these
        away1 = rig.fake.message_json(rig.general, rig.alice, "while you were out")
        away2 = rig.fake.message_json(rig.general, rig.alice, f"<@{rig.bot['id']}> ping",
                                      mentions=[rig.mention()])
        away3 = rig.fake.message_json(rig.thread, rig.alice, "thread, while away")
        second = rig.make_channel()
        second.bind(store)
        await second.start(rig.sink)
        try:
            await rig.next_inbound(5)
            ids = [m.message_id for m in rig.received]
            assert ids[:2] == [before["id"], in_thread["id"]]
            assert sorted(ids[2:]) == sorted([away1["id"], away2["id"], away3["id"]])
            by_id = {m.message_id: m for m in rig.received}
            assert by_id[away2["id"]].mentions_bot is True
            assert by_id[away3["id"]].chat_id == rig.general["id"]
            assert by_id[away3["id"]].thread_id == rig.thread["id"]
            # read after the mark: "before the restart" did not come back
            assert ids.count(before["id"]) == 1
            await wait_until(lambda: store.values.get(f"last:{rig.general['id']}")
                             == away2["id"])
        finally:
            await second.stop()


async def test_unresumable_session_gap_is_read_back() -> None:
    store = MemoryCursorStore()
    async with DiscordRig(start=False) as rig:
        rig.channel = rig.make_channel()
        rig.channel.bind(store)
        await rig.channel.start(rig.sink)
        await rig.say(rig.general, "hello")
        await rig.next_inbound(1)
        await wait_until(lambda: f"last:{rig.general['id']}" in store.values)
        await rig.fake.invalidate_sessions()
        # the gateway never delivers this one (no session); only history has it
        gap = await rig.say(rig.general, "said during the outage")
        got = await rig.next_inbound(2)
        assert got.message_id == gap["id"]
        assert len(rig.fake.identifies) == 2  # a new session, not a resume
        assert history_reads(rig, rig.general) >= 1


async def test_without_a_cursor_store_nothing_is_read_back() -> None:
    async with DiscordRig() as rig:
        await rig.say(rig.general, "hello")
        await rig.next_inbound(1)
        await rig.fake.invalidate_sessions()
        await wait_until(lambda: len(rig.fake.identifies) == 2 and rig.fake.connected.is_set())
        await rig.say(rig.general, "after")
        await rig.next_inbound(2)
        assert history_reads(rig, rig.general) == 0


class BrokenStore(MemoryCursorStore):
    async def set(self, key: str, value: str) -> None:
        raise ConnectionError("redis unavailable")


async def test_a_failing_cursor_store_does_not_block_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with DiscordRig(start=False) as rig:
        rig.channel = rig.make_channel()
        rig.channel.bind(BrokenStore())
        await rig.channel.start(rig.sink)
        await rig.say(rig.general, "one")
        await rig.say(rig.general, "two")
        await rig.next_inbound(2)
        assert "could not move the mark" in caplog.text


async def test_marks_move_forward_only_and_stay_bounded() -> None:
    store = MemoryCursorStore()
    marks = LastSeen(store, max_channels=2)
    await marks.advance(1, 100)
    await marks.advance(1, 90)  # older: ignored
    await marks.advance(2, 300)
    await marks.advance(3, 200)  # third channel: the stalest (1, mark 100) goes
    assert marks.marks() == {2: 300, 3: 200}
    assert store.values[INDEX_KEY] == "[2, 3]"
    reloaded = LastSeen(store)
    assert await reloaded.load() == {2: 300, 3: 200}


async def test_unreadable_marks_are_skipped() -> None:
    store = MemoryCursorStore()
    store.values[INDEX_KEY] = "not json"
    assert await LastSeen(store).load() == {}
    store.values[INDEX_KEY] = "[5, 6]"
    store.values["last:5"] = "55"
    store.values["last:6"] = "garbage"
    assert await LastSeen(store).load() == {5: 55}
    assert await LastSeen(None).load() == {}

"""Edits and deletions reaching the inbox: real Valkey, the gateway in-process, real
worker processes and the scripted model (which records what each turn saw)."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from channels.models import Inbound
from gateway.intake import AMEND_STALE, apply_change
from gateway.queue import GatewayQueue, Keys, encode_entry, parse_entry
from tests.pipeline.conftest import Stack, Valkey

CHAT = "c1"
GROUP = f"local:{CHAT}"


def message(message_id: str, text: str, **kw: Any) -> Inbound:
    base: dict[str, Any] = {"channel": "local", "chat_id": CHAT, "is_group": False,
                            "sender_id": "alice", "sender_name": "Alice",
                            "message_id": message_id, "text": text}
    return Inbound(**{**base, **kw})


def edit(original: str, text: str, n: int = 1, **kw: Any) -> Inbound:
    return message(f"{original}:edit:{n}", text, kind="edit", original_id=original, **kw)


def deletion(original: str) -> Inbound:
    return message(f"{original}:deleted", "", kind="deletion", original_id=original)


async def test_an_edit_of_a_waiting_message_changes_what_the_turn_sees(stack: Stack) -> None:
    gw = await stack.start_gateway()  # no worker yet: the message waits in the mailbox
    assert gw.inbox is not None
    assert await gw.inbox.accept(message("m1", "meet at 5pm")) == "engage"
    # not the author: never rewrites someone else's words, only recorded
    assert await gw.inbox.accept(edit("m1", "FORGED", sender_id="mallory")) == "recorded"
    assert await gw.inbox.accept(edit("m1", "meet at 6pm", 2)) == "edited"
    assert await gw.inbox.accept(edit("m1", "meet at 6pm", 2)) == "duplicate"
    stack.start_workers(1)
    await stack.wait_for(lambda: len(stack.turns()) == 1, what="the turn")
    [turn] = stack.turns()
    assert (turn["ids"], turn["texts"]) == (["m1"], ["meet at 6pm"])
    await stack.settled(GROUP)
    # the forged edit was recorded; the redaction job finds alice's line, refuses it
    # and drops the record: memory keeps her words
    await stack.wait_for(lambda: not stack.r.exists(f"pnc:changes:{GROUP}"),
                         what="the forged edit to be dropped")
    episodes = "".join(p.read_text() for p in (stack.data_dir / "groups" / "local" / CHAT
                                               / "episodes").rglob("*.md"))
    assert "Alice (alice): meet at 6pm\n" in episodes and "FORGED" not in episodes


async def test_a_deletion_removes_a_waiting_message(stack: Stack) -> None:
    gw = await stack.start_gateway()
    assert gw.inbox is not None
    assert await gw.inbox.accept(message("m1", "my password is hunter2")) == "engage"
    assert await gw.inbox.accept(message("m2", "what's the weather?")) == "engage"
    assert await gw.inbox.accept(deletion("m1")) == "deleted"
    stack.start_workers(1)
    await stack.wait_for(lambda: len(stack.turns()) == 1, what="the turn")
    [turn] = stack.turns()
    assert turn["ids"] == ["m2"] and "hunter2" not in json.dumps(turn)
    await stack.settled(GROUP)
    assert not stack.r.exists(f"pnc:changes:{GROUP}")  # applied, nothing left to record


async def test_an_edit_of_an_answered_message_is_recorded_and_starts_no_turn(
    stack: Stack,
) -> None:
    gw = await stack.start_gateway()
    assert gw.inbox is not None
    stack.start_workers(1)
    first = await stack.ask(CHAT, "alice", "meet at 5pm", message_id="m1")
    assert first.reply == "ack m1"
    await stack.settled(GROUP)
    stack.stop_workers()  # the redaction job they would run is checked after
    assert await gw.inbox.accept(edit("m1", "meet at 6pm")) == "recorded"
    assert await gw.inbox.accept(deletion("m1")) == "recorded"
    # nothing was queued for a turn: no mailbox entry, no context entry, no drain lease
    assert not stack.r.exists(f"pnc:mailbox:{GROUP}", f"pnc:context:{GROUP}",
                              f"pnc:drain:{GROUP}")
    changes = [json.loads(x) for x in stack.r.lrange(f"pnc:changes:{GROUP}", 0, -1)]
    assert [(c["kind"], c["original_id"], c.get("text")) for c in changes] == [
        ("edit", "m1", "meet at 6pm"), ("deletion", "m1", None)]
    # one redaction job applies both: the deletion wins, neither text stays
    stack.start_workers(1)
    await stack.wait_for(lambda: not stack.r.exists(f"pnc:changes:{GROUP}"),
                         what="the changes to be applied")
    episodes = "".join(p.read_text() for p in (stack.data_dir / "groups" / "local" / CHAT
                                               / "episodes").rglob("*.md"))
    assert "(alice): [redacted]\n" in episodes
    assert "5pm" not in episodes and "6pm" not in episodes
    # the next message's turn sees only itself: the edit never joined as new words
    second = await stack.ask(CHAT, "alice", "and the venue?", message_id="m2")
    assert second.reply == "ack m2"
    assert [t["ids"] for t in stack.turns()] == [["m1"], ["m2"]]


async def test_an_entry_changed_underneath_is_read_again_never_lost(valkey: Valkey) -> None:
    r = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    q = GatewayQueue(r, Keys())
    try:
        first = message("m1", "v1")
        await q.push(GROUP, first.dedupe_id, encode_entry(first.model_dump_json(), True),
                     engaged=True, dedupe_ttl=60, lease_ttl_ms=60_000, job_id="j")
        [stored] = await q.waiting(GROUP)
        change = edit("m1", "v3", 3)
        # what a concurrent edit leaves: the entry read is no longer the one waiting
        stale = stored.replace('"text":"v1"', '"text":"v2"')
        assert await q.amend(GROUP, change.dedupe_id, stale, "x", "{}", dedupe_ttl=60,
                             cap=10, final=False) == AMEND_STALE
        assert await q.waiting(GROUP) == [stored]  # nothing changed, nothing recorded
        assert not await r.exists(f"pnc:changes:{GROUP}", f"pnc:dedupe:{change.dedupe_id}")
        assert await apply_change(q, change, GROUP, dedupe_ttl=60) == "edited"
        [entry] = await q.waiting(GROUP)
        assert parse_entry(entry).msg["text"] == "v3"
    finally:
        await r.aclose()

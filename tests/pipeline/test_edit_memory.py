"""Edits of answered messages reach memory (issue 13): the recorded edit is applied by
the redaction job, so the episode, the index and what Redis still holds say the words
as they are now; the audit log records the edit without either text. Real Valkey, the
gateway in-process, real worker processes (end to end) or the job called in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from channels.models import Inbound
from gateway.queue import Keys, encode_entry, job_queue, parse_entry
from memory_store.maintenance import EDITED_SUFFIX
from tests.pipeline.conftest import Stack
from tests.pipeline.test_redaction import (
    SECRET,
    _episode,
    answered,
    files_holding,
    group_dir,
    index_hits,
    message,
    redactions,
)
from workers.context import WorkerContext
from workers.redaction import redact_group

K = Keys()
OLD = "I live in Lisbon near the old tram"
NEW = "I live in Porto near the old bridge"


def edit(chat: str, original: str, text: str, sender: str | None = None) -> Inbound:
    return message(chat, f"{original}:edit:1", text, kind="edit", original_id=original,
                   sender_id=sender or chat)


def episodes(root: Path) -> str:
    return "".join(p.read_text() for p in (root / "episodes").rglob("*.md"))


async def test_an_answered_message_edited_holds_the_new_words(stack: Stack) -> None:
    inbox = await answered(stack, OLD)
    group = "local:ann"
    root = group_dir(stack, "ann")
    assert index_hits(stack.data_dir, group, "lisbon")
    # copies Redis still holds: a dead-lettered batch with the message, an entry quoting it
    dead = message("ann", "m1", OLD)
    stack.r.rpush(K.dead(group), f"7 {encode_entry(dead.model_dump_json(), True)}")
    quoting = message("ann", "m3", "really?", reply_to_id="m1", reply_to_text=OLD)
    stack.r.rpush(K.context(group), f"8 {encode_entry(quoting.model_dump_json(), False)}")

    assert await inbox.accept(edit("ann", "m1", NEW)) == "recorded"
    assert await inbox.accept(edit("ann", "m1", NEW)) == "duplicate"  # redelivered
    await stack.wait_for(lambda: not stack.r.exists(K.changes(group)) and
                         bool(redactions(root)), what="the edit to be applied")
    assert f"(ann): {NEW}{EDITED_SUFFIX}\n" in episodes(root)
    assert files_holding(root, "Lisbon") == []
    assert index_hits(stack.data_dir, group, "lisbon") == []
    assert index_hits(stack.data_dir, group, "porto")
    [entry] = redactions(root)
    assert (entry["reason"], entry["message_id"]) == ("edit", "m1")
    assert "lisbon" not in json.dumps(entry).lower() and "porto" not in json.dumps(entry).lower()
    [held_dead] = [parse_entry(x) for x in stack.r.lrange(K.dead(group), 0, -1)]
    assert held_dead.msg["text"] == NEW
    [held] = [parse_entry(x) for x in stack.r.lrange(K.context(group), 0, -1)]
    assert held.msg["reply_to_text"] == NEW and held.msg["text"] == "really?"
    # redelivered once more, later: still deduped, applied once
    assert await inbox.accept(edit("ann", "m1", NEW)) == "duplicate"
    assert not stack.r.exists(K.changes(group)) and len(redactions(root)) == 1


async def test_an_edit_of_a_waiting_message_takes_the_existing_path(stack: Stack) -> None:
    gw = await stack.start_gateway()  # no worker: the message waits in the mailbox
    assert gw.inbox is not None
    group = "local:bo"
    assert await gw.inbox.accept(message("bo", "w1", OLD)) == "engage"
    assert await gw.inbox.accept(edit("bo", "w1", NEW)) == "edited"
    assert not stack.r.exists(K.changes(group))
    jobs = job_queue(stack.r).get_jobs()
    assert [j.description for j in jobs] == [f"drain {group}"]  # no redaction job
    [waiting] = [parse_entry(x) for x in stack.r.lrange(K.mailbox(group), 0, -1)]
    assert waiting.msg["text"] == NEW


# -- the job in-process ------------------------------------------------------------------


def _record(sender: str, text: str = NEW) -> str:
    return json.dumps({"kind": "edit", "channel": "local", "account": "default",
                       "chat_id": "ann", "original_id": "m1", "event_id": "m1:edit:1",
                       "sender_id": sender, "text": text})


def test_an_edit_by_someone_else_changes_nothing(ctx: WorkerContext) -> None:
    group, r = "local:ann", ctx.redis
    root = _episode(ctx, group)
    r.hset(K.turn("turn-x"), mapping={"published": "1", "reply": f"noted, {SECRET}"})
    held = message("ann", "m1", SECRET)
    r.rpush(K.dead(group), f"3 {encode_entry(held.model_dump_json(), True)}")
    before = {p: p.read_bytes() for p in root.rglob("*.md")}
    redis_before = r.lrange(K.dead(group), 0, -1)
    r.rpush(K.changes(group), _record("mallory", "FORGED"))
    assert redact_group(group, ctx=ctx)["end"] == "redacted"
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == before
    assert r.lrange(K.dead(group), 0, -1) == redis_before
    assert r.hget(K.turn("turn-x"), "reply") == f"noted, {SECRET}".encode()
    assert redactions(root) == [] and not r.exists(K.changes(group))  # record dropped


def test_applying_an_edit_twice_changes_nothing_the_second_time(
        ctx: WorkerContext) -> None:
    group, r = "local:ann", ctx.redis
    root = _episode(ctx, group)
    r.hset(K.turn("turn-x"), mapping={"published": "1", "reply": f"noted, {SECRET}"})
    held = message("ann", "m1", SECRET)
    r.rpush(K.dead(group), f"3 {encode_entry(held.model_dump_json(), True)}")
    r.rpush(K.changes(group), _record("ann"))
    out = redact_group(group, ctx=ctx)
    assert out["end"] == "redacted" and out["requests"] == 1
    text = episodes(root)
    assert f"Ann (ann): {NEW}{EDITED_SUFFIX}\n" in text and f"Bot: noted, {NEW}\n" in text
    assert files_holding(root, "Zanzibar") == []
    assert r.hget(K.turn("turn-x"), "reply") == f"noted, {NEW}".encode()
    [dead] = [parse_entry(x) for x in r.lrange(K.dead(group), 0, -1)]
    assert dead.msg["text"] == NEW
    # a crash before the request was removed: the same record is applied again
    snapshot = {p: p.read_bytes() for p in root.rglob("*.md")}
    redis_snapshot = (r.lrange(K.dead(group), 0, -1), r.hgetall(K.turn("turn-x")))
    r.rpush(K.changes(group), _record("ann"))
    again: dict[str, Any] = redact_group(group, ctx=ctx)
    assert again["files"] == 0 and again["entries"] == 0
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == snapshot
    assert (r.lrange(K.dead(group), 0, -1), r.hgetall(K.turn("turn-x"))) == redis_snapshot
    assert len(redactions(root)) == 1 and not r.exists(K.changes(group))

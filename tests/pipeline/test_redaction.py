"""Redaction in the loop: a platform deletion of an answered message and a confirmed
``/forget`` take the words out of every file under the group directory, the index and
what Redis still holds; the audit log records it without them. Real Valkey, the
gateway in-process, real worker processes (end to end) or the job called in-process."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from rq import Queue

from channels.models import Inbound
from gateway.intake import CHANGE_STALE, DrainEnqueuer, Inbox, Sweeper
from gateway.queue import Keys, background_queue, encode_entry, parse_entry
from memory_store import open_memory
from memory_store.files import AuditLog
from memory_store.maintenance import REDACTED_MARKER, redact_message
from tests.pipeline.conftest import Stack, Valkey, deleted_m1
from workers.context import WorkerContext
from workers.local_states import states_dir
from workers.redaction import MAX_RESCHEDULES, SLOW_DELAY, redact_group

K = Keys()
SECRET = "my door code is 4417 Zanzibar"
OPERATOR = "boss"


def message(chat: str, mid: str, text: str, **kw: Any) -> Inbound:
    base: dict[str, Any] = {"channel": "local", "chat_id": chat, "is_group": False,
                            "sender_id": chat, "sender_name": chat.title(),
                            "message_id": mid, "text": text}
    return Inbound(**{**base, **kw})


def deletion(chat: str, original: str) -> Inbound:
    return message(chat, f"{original}:deleted", "", kind="deletion", original_id=original)


def files_holding(root: Path, words: str) -> list[str]:
    """Every file under ``root`` (``.index/``, audit log, lock included) whose bytes
    hold ``words``, in any case."""
    needle = words.lower().encode()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and needle in p.read_bytes().lower())


def group_dir(stack: Stack, chat: str) -> Path:
    return stack.data_dir / "groups" / "local" / chat


def index_hits(data_dir: Path, group: str, word: str) -> list[str]:
    with closing(open_memory(data_dir, group, backend="file", watch="poll")) as mem:
        hits = mem.search_sync(word, k=10, filters={"include_superseded": True})
    return [h.id for h in hits]


def redactions(root: Path) -> list[dict[str, Any]]:
    return [e for e in AuditLog(root).entries() if e["op"] == "redact"]


async def answered(stack: Stack, text: str, chat: str = "ann") -> Inbox:
    """The gateway and one worker started, ``text`` sent as message m1 in the DM
    ``chat``, answered, and its turn settled; returns the gateway's inbox."""
    gw = await stack.start_gateway()
    assert gw.inbox is not None
    stack.start_workers(1)
    assert (await stack.ask(chat, chat, text, message_id="m1")).reply == "ack m1"
    await stack.settled(f"local:{chat}")
    return gw.inbox


@pytest.fixture
async def admin_stack(tmp_path: Path, valkey: Valkey) -> AsyncIterator[Stack]:
    s = Stack(tmp_path, valkey, f'\n[policy]\nadmins = ["local:{OPERATOR}"]\n')
    yield s
    await s.close()


async def test_a_platform_deletion_redacts_memory_and_redis(stack: Stack) -> None:
    inbox = await answered(stack, SECRET)
    group = "local:ann"
    assert (await stack.ask("ann", "ann", "hello there", message_id="m2")).reply == "ack m2"
    await stack.settled(group)
    root = group_dir(stack, "ann")
    assert files_holding(root, "Zanzibar") and index_hits(stack.data_dir, group, "zanzibar")
    # copies Redis still holds: a dead-lettered batch with the message, a waiting entry
    # quoting it
    dead = message("ann", "m1", SECRET)
    stack.r.rpush(K.dead(group), f"7 {encode_entry(dead.model_dump_json(), True)}")
    quoting = message("ann", "m3", "what?", reply_to_id="m1", reply_to_text=SECRET)
    stack.r.rpush(K.context(group), f"8 {encode_entry(quoting.model_dump_json(), False)}")

    stack.r.delete("test:turns")  # the scripted model's own record of what it saw
    assert await inbox.accept(deletion("ann", "m1")) == "recorded"
    await stack.wait_for(lambda: not stack.r.exists(K.changes(group)) and
                         bool(redactions(root)), what="the redaction")
    assert files_holding(root, "Zanzibar") == []
    assert files_holding(root, "4417") == []
    assert index_hits(stack.data_dir, group, "zanzibar") == []
    assert "hello there" in "".join(p.read_text() for p in (root / "episodes").rglob("*.md"))
    [entry] = redactions(root)
    assert entry["reason"] == "deletion" and entry["message_id"] == "m1"
    assert "zanzibar" not in json.dumps(entry).lower()
    assert not stack.r.exists(K.dead(group))  # the dead batch held only that message
    [held] = [parse_entry(x) for x in stack.r.lrange(K.context(group), 0, -1)]
    assert held.msg["reply_to_text"] == REDACTED_MARKER and held.msg["text"] == "what?"
    # Redis's own append-only file was rewritten: its history no longer holds them
    await stack.wait_for(lambda: aof_idle(stack.r), what="the AOF rewrite")
    assert files_holding(stack.valkey.data_dir, "Zanzibar") == []


async def test_a_deletion_whose_job_was_lost_is_swept(stack: Stack) -> None:
    inbox = await answered(stack, SECRET)
    group = "local:ann"
    stack.stop_workers()
    assert await inbox.accept(deletion("ann", "m1")) == "recorded"
    # the redaction job is lost (its enqueue failed, or the queue was flushed): the
    # deletion is only in changes:{group}
    Queue(background_queue(), connection=stack.r).empty()
    stack.start_workers(1)
    r = aioredis.Redis.from_url(stack.valkey.url)
    sweeper = Sweeper(stack.config, r, DrainEnqueuer(stack.config, stack.r, K), K)
    try:
        now = time.time()
        assert await sweeper.sweep_changes(now) == []  # recorded just now: not stale
        stack.r.set(K.redacting(group), "1")  # a redaction job holds the group
        assert await sweeper.sweep_changes(now + CHANGE_STALE + 1) == []
        stack.r.delete(K.redacting(group))
        assert await sweeper.sweep_changes(now + CHANGE_STALE + 1) == [group]
        assert await sweeper.sweep_changes(now + CHANGE_STALE + 2) == []  # asked already
    finally:
        await r.aclose()
    root = group_dir(stack, "ann")
    await stack.wait_for(lambda: not stack.r.exists(K.changes(group)) and
                         bool(redactions(root)), what="the swept redaction")
    assert files_holding(root, "Zanzibar") == []


def aof_idle(r: redis.Redis) -> bool:
    info: dict[str, Any] = r.info("persistence")
    return not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"] and \
        info.get("aof_rewrites", 1) > 0


async def test_forget_is_refused_to_a_member_previewed_then_confirmed_by_an_admin(
    admin_stack: Stack,
) -> None:
    s = admin_stack
    await s.start_gateway()
    s.start_workers(1)
    group = "local:crew"
    said = await s.ask("crew", "bo", f"@bot {SECRET}", group=True, mention=True,
                       message_id="g1")
    assert said.reply == "ack g1"
    await s.settled(group)
    root = group_dir(s, "crew")
    before = files_holding(root, "4417 zanzibar")
    assert before

    member = await s.ask("crew", "bo", "/forget 4417 zanzibar confirm", group=True,
                         message_id="f1")
    assert member.reply is not None and member.reply.startswith("Not allowed")
    preview = await s.ask("crew", OPERATOR, "/forget 4417 Zanzibar", group=True,
                          message_id="f2")
    assert preview.reply is not None and "/forget <your words> confirm" in preview.reply
    assert "episode" in preview.reply
    assert files_holding(root, "4417 zanzibar") == before  # a preview changes nothing
    assert not s.r.exists(K.forget(group))

    done = await s.ask("crew", OPERATOR, "/forget 4417 Zanzibar confirm", group=True,
                       message_id="f3")
    assert done.reply is not None and done.reply.startswith("Forgetting your words")
    for reply in (preview.reply, done.reply):  # neither quotes the words back
        assert "4417" not in reply and "zanzibar" not in reply.lower(), reply
    await s.wait_for(lambda: not s.r.exists(K.forget(group)) and bool(redactions(root)),
                     what="the redaction")
    assert files_holding(root, "4417 zanzibar") == []
    assert index_hits(s.data_dir, group, "zanzibar") == []
    [entry] = redactions(root)
    assert entry["reason"] == "forget" and "zanzibar" not in json.dumps(entry).lower()
    # no Redis key holds them (the bot's preview and confirmation do not quote them, and
    # the local chat's reply stream is scrubbed), nor the append-only file once rewritten
    s.r.delete("test:turns")  # the scripted model's own record of what it saw
    holding = {k.decode() for k in s.r.scan_iter(count=1000)
               if b"zanzibar" in (s.r.dump(k) or b"").lower()}
    assert holding == set()
    await s.wait_for(lambda: aof_idle(s.r), what="the AOF rewrite")
    assert files_holding(s.valkey.data_dir, "Zanzibar") == []
    memory = await s.ask("crew", "bo", "/memory", group=True, message_id="f4")
    assert memory.reply is not None and "What I keep about local:crew" in memory.reply


# -- the job in-process ------------------------------------------------------------------


def _episode(ctx: WorkerContext, group: str) -> Path:
    _, mem = ctx.group_memory(group)
    mem.write_sync(f"Turn in {group}.\n\n- [2026-11-30 10:00:00] Ann (ann): {SECRET}\n\n"
                   f"Bot: noted, {SECRET}\n", kind="episode",
                   metadata={"id": "turn-x", "message_ids": ["m1"], "trust": 0.8,
                             "source": f"{group}:msg/m1"})
    return mem.group.path


def test_the_job_is_idempotent_and_scrubs_the_kept_reply(ctx: WorkerContext) -> None:
    group, r = "local:ann", ctx.redis
    root = _episode(ctx, group)
    r.hset(K.turn("turn-x"), mapping={"published": "1", "reply": f"noted, {SECRET}"})
    # an edit of a message memory never saw: nothing to apply, the record is consumed
    edit = {"kind": "edit", "original_id": "m9", "text": "new words", "account": "default",
            "sender_id": "ann"}
    gone = {"kind": "deletion", "original_id": "m1", "event_id": "d1", "account": "default"}
    r.rpush(K.changes(group), json.dumps(edit), json.dumps(gone))
    out = redact_group(group, ctx=ctx)
    assert out["end"] == "redacted" and out["requests"] == 2
    assert files_holding(root, "Zanzibar") == [] and files_holding(root, "new words") == []
    assert r.hget(K.turn("turn-x"), "reply") == f"noted, {REDACTED_MARKER}".encode()
    assert not r.exists(K.changes(group))
    snapshot = {p: p.read_bytes() for p in root.rglob("*.md")}
    r.rpush(K.changes(group), json.dumps(gone))  # the same deletion again
    assert redact_group(group, ctx=ctx)["files"] == 0
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == snapshot
    assert len(redactions(root)) == 1


def test_a_retry_after_the_memory_rewrite_still_scrubs_what_redis_holds(
        ctx: WorkerContext) -> None:
    """The job crashed after rewriting memory, before scrubbing Redis: the retry finds
    only the marker in memory, and still takes the words out of Redis (by the held copy
    of the deleted message and by the quote's reply_to_id)."""
    group, r = "local:ann", ctx.redis
    root = _episode(ctx, group)
    dead = message("ann", "m1", SECRET)
    r.rpush(K.dead(group), f"7 {encode_entry(dead.model_dump_json(), True)}")
    quoting = message("ann", "m3", "what?", reply_to_id="m1", reply_to_text=SECRET)
    echo = message("ann", "m4", f"did you say {SECRET}?")  # no reply_to: by the words
    r.rpush(K.context(group), f"8 {encode_entry(quoting.model_dump_json(), False)}",
            f"9 {encode_entry(echo.model_dump_json(), False)}")
    _, mem = ctx.group_memory(group)
    redact_message(mem, "m1", request="deletion:d1", actor="test")  # the first attempt
    assert files_holding(root, "Zanzibar") == []
    gone = {"kind": "deletion", "original_id": "m1", "event_id": "d1", "account": "default"}
    r.rpush(K.changes(group), json.dumps(gone))
    assert redact_group(group, ctx=ctx)["end"] == "redacted"
    assert not r.exists(K.dead(group))
    held = [parse_entry(x).msg for x in r.lrange(K.context(group), 0, -1)]
    assert [(m["message_id"], m.get("reply_to_text")) for m in held] == \
        [("m3", REDACTED_MARKER), ("m4", None)]
    assert "zanzibar" not in json.dumps(held).lower()


def test_an_unknown_id_loses_nothing_and_a_busy_group_is_rescheduled(
        ctx: WorkerContext) -> None:
    group, r = "local:ann", ctx.redis
    root = _episode(ctx, group)
    snapshot = {p: p.read_bytes() for p in root.rglob("*.md")}
    r.rpush(K.changes(group), json.dumps({"kind": "deletion", "original_id": "nope"}))
    r.set(K.lease(group), "a-drain-job")  # a drain is queued: turns go first
    busy = redact_group(group, ctx=ctx)
    assert busy["end"] == "rescheduled" and r.llen(K.changes(group)) == 1
    [job_id] = [j.decode() for j in r.zrange("rq:scheduled:pnc-drain.background", 0, -1)]
    assert r.hget(f"rq:job:{job_id}", "description") == f"redact {group}".encode()
    # never given up: a group busy for long is tried again less often
    slow = redact_group(group, ctx=ctx, reschedules=MAX_RESCHEDULES)
    assert slow["end"] == "rescheduled"
    at = r.zscore("rq:scheduled:pnc-drain.background", slow["job"])
    assert at is not None and at >= time.time() + SLOW_DELAY - 30
    r.delete(K.lease(group))
    assert redact_group(group, ctx=ctx)["files"] == 0
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == snapshot
    assert redactions(root) == [] and not r.exists(K.changes(group))


LOCKER = "hello MARK-mx1, my locker combination is Kestrel-4471"
#: its qualifying words (memory_store.maintenance._words), as they are quoted below
LOCKER_WORDS = (b"mark-mx1", b"kestrel-4471", b"combination")
UNRELATED = "hello everyone, meet me at the station at nine"


def _reply_event(chat: str, text: str, reply_id: str) -> dict[str, str]:
    out = {"channel": "local", "account": "default", "chat_id": chat, "text": text,
           "reply_to_id": "m1", "reply_id": reply_id}
    return {"type": "reply", "data": json.dumps(out)}


def _keys_holding(r: redis.Redis, needle: bytes) -> set[str]:
    """Every key whose serialized value (``DUMP``: a stream's listpacks as they are,
    entries marked deleted included) holds ``needle``, in any case."""
    return {k.decode() for k in r.scan_iter(count=1000)
            if needle in (r.dump(k) or b"").lower()}


def test_a_deletions_quoted_words_leave_every_redis_key_and_the_aof(
        ctx: WorkerContext, valkey: Valkey) -> None:
    """The bot's reply quoted part of the deleted message: it is in the turn's kept
    reply, the outbox (one entry pending at a gateway, one sent and XDELed), the local
    chat's reply stream; a later message quoting it waits in the context list and in
    the extraction queue; a stored extraction answer holds it. Afterwards no key (its
    serialized bytes) and no file of the AOF holds any of its words; the outbox keeps
    its ids, its consumer group and the pending entry; other groups' entries and text
    sharing only common words are unchanged."""
    group, r = "local:ann", ctx.redis
    r.config_set("rdbcompression", "no")  # so DUMP and the AOF's RDB preamble show bytes
    _, mem = ctx.group_memory(group)
    mem.write_sync(f"Turn in {group}.\n\n- [2026-11-30 10:00:00] Ann (ann): {LOCKER}\n"
                   f"- [2026-11-30 10:00:01] Bob (bob): {UNRELATED}\n\n"
                   "Bot: SEEN: MARK-mx1, a locker combination\n", kind="episode",
                   metadata={"id": "turn-a", "message_ids": ["m1", "m2"], "trust": 0.8,
                             "source": f"{group}:msg/m1,m2"})
    mem.write_sync(f"Turn in {group}.\n\n- [2026-11-30 10:05:00] Cy (cy): ok, Kestrel-4471"
                   "\n\nBot: noted\n", kind="episode",
                   metadata={"id": "turn-b", "message_ids": ["m5"], "trust": 0.8,
                             "source": f"{group}:msg/m5"})
    r.hset(K.turn("turn-a"), mapping={"published": "1",
                                      "reply": "SEEN: MARK-mx1, a locker combination"})
    r.hset(K.extraction("turn-b"), "result", json.dumps(
        {"facts": [{"about": "Ann", "fact": "Ann's code is Kestrel-4471"}]}))
    # a command of turn-b printed it; its result is kept for the turn's retries
    r.hset(K.tool_runs("turn-b"), "abc:1", json.dumps(
        {"call_id": "c1", "ok": True, "output": "notes: Kestrel-4471", "error": ""}))
    asking = message("ann", "m3", "was it kestrel-4471?", reply_to_id="r-1",
                     reply_to_text="SEEN: MARK-mx1, a locker combination")
    plain = message("ann", "m4", UNRELATED)
    held = [f"8 {encode_entry(asking.model_dump_json(), False)}",
            f"9 {encode_entry(plain.model_dump_json(), False)}"]
    r.rpush(K.context(group), *held)
    r.rpush(K.extractions(group), json.dumps({"turn_id": "turn-c", "entries": held}))
    r.xgroup_create(K.outbox, "gateway", id="0", mkstream=True)
    sent = r.xadd(K.outbox, _reply_event("ann", "SEEN: MARK-mx1, noted", "r-1"))
    waiting = r.xadd(K.outbox, _reply_event("ann", "a locker combination", "r-2"))
    others = r.xadd(K.outbox, _reply_event("bob", UNRELATED, "r-3"))
    r.xreadgroup("gateway", "gw1", {K.outbox: ">"}, count=2)  # sent and waiting
    r.xack(K.outbox, "gateway", sent)
    r.xdel(K.outbox, sent)  # as the gateway does: the bytes stay in the listpack
    local_out = "pnc:local:out:default:ann"
    r.xadd(local_out, {"type": "chunk", "text": "SEEN: MARK-mx1, a locker combination"})
    r.xadd(local_out, {"type": "chunk", "text": UNRELATED})
    assert all(_keys_holding(r, w) for w in LOCKER_WORDS)
    assert _keys_holding(r, b"mark-mx1") >= {K.outbox, local_out, K.turn("turn-a")}
    # the bot's reply repeating its words was delivered as P1; a later message replied
    # to P1 and a fact was drawn from it (no word of the deleted message in either)
    r.hset(K.outcome("turn-a"), "0", "delivered P1")
    mem.write_sync(f"Turn in {group}.\n\n- [2026-11-30 10:06:00] Ann (ann): why?\n\n"
                   "Bot: ok\n", kind="episode",
                   metadata={"id": "turn-e", "message_ids": ["m6"], "quotes": {"m6": "P1"},
                             "trust": 0.8, "source": f"{group}:msg/m6"})
    mem.write_sync("Ann keeps something in a locker", kind="fact", metadata={
        "id": "fact-m6", "message_ids": ["m6"], "source": f"{group}:msg/m6", "trust": 0.5})
    r.rpush(K.changes(group), json.dumps({"kind": "deletion", "original_id": "m1",
                                          "event_id": "d1", "account": "default"}))

    assert redact_group(group, ctx=ctx)["end"] == "redacted"
    assert mem.read_sync("fact-m6").metadata.get("superseded_reason") == "source deleted"
    for word in LOCKER_WORDS:
        assert _keys_holding(r, word) == set(), word
        assert files_holding(mem.group.path, word.decode()) == [], word
    assert r.hget(K.turn("turn-a"), "reply") == (
        f"SEEN: {REDACTED_MARKER}, a locker {REDACTED_MARKER}".encode())
    # a stored extraction answer loses the fact that held them, before it is filed
    assert json.loads(r.hget(K.extraction("turn-b"), "result") or b"{}") == {"facts": []}
    assert json.loads(r.hget(K.tool_runs("turn-b"), "abc:1") or b"{}")["output"] == \
        f"notes: {REDACTED_MARKER}"
    ctx_held = [parse_entry(x).msg for x in r.lrange(K.context(group), 0, -1)]
    assert [m["text"] for m in ctx_held] == [f"was it {REDACTED_MARKER}?", UNRELATED]
    outbox = {i.decode(): json.loads(f[b"data"])["text"] for i, f in r.xrange(K.outbox)}
    assert outbox == {waiting.decode(): f"a locker {REDACTED_MARKER}", others.decode(): UNRELATED}
    [pending] = r.xpending_range(K.outbox, "gateway", "-", "+", 10)
    assert (pending["message_id"], pending["consumer"]) == (waiting, b"gw1")
    assert r.xinfo_stream(K.outbox)["last-generated-id"] == others
    local = [f[b"text"].decode() for _, f in r.xrange(local_out)]
    assert local == [f"SEEN: {REDACTED_MARKER}, a locker {REDACTED_MARKER}", UNRELATED]
    # the AOF, rewritten from the data set as it is now, holds none of them either
    deadline = time.monotonic() + 30
    while not aof_idle(r) and time.monotonic() < deadline:
        time.sleep(0.05)
    for word in LOCKER_WORDS:
        assert files_holding(valkey.data_dir, word.decode()) == [], word


async def test_a_deleted_message_quoted_by_the_bot_leaves_files_redis_and_aof(
        stack: Stack) -> None:
    """End to end on the local channel: the bot's reply quotes part of a message, the
    next turn is asked about it (its memory search brings the reply back), then the
    message is deleted: none of its words stays in any file of the group, any Redis key
    (the chat's reply stream included) or the AOF; the other turn stays."""
    stack.r.config_set("rdbcompression", "no")  # so DUMP and the AOF show plain bytes
    said = "hello, my locker combination is Kestrel-4471 echo[combination Kestrel-4471]"
    inbox = await answered_with(stack, said, "ack m1 | SEEN: combination Kestrel-4471")
    group = "local:ann"
    # a reply to m1 showing its text (as Telegram or Slack deliver one) waits as context
    quoting = message("ann", "m3", "which one?", reply_to_id="m1",
                      reply_to_text="hello, my locker combination is Kestrel-4471")
    stack.r.rpush(K.context(group), f"8 {encode_entry(quoting.model_dump_json(), False)}")
    again = await stack.ask("ann", "ann", "what is my Kestrel-4471 for?", message_id="m2")
    assert again.reply == "ack m2 m3"
    await stack.settled(group)
    root = group_dir(stack, "ann")
    with closing(open_memory(stack.data_dir, group, backend="file", watch="poll")) as mem:
        [later] = [r for r in mem.records({"kind": "episode"})
                   if "m2" in r.metadata["message_ids"]]
        assert later.metadata["quotes"] == {"m3": "m1"}  # the turn recorded the link
        mem.write_sync("Ann asked which one", kind="fact", metadata={  # as extraction would
            "id": "fact-m3", "message_ids": ["m3"], "source": f"{group}:msg/m3", "trust": 0.5})
    assert files_holding(root, "combination") and files_holding(root, "kestrel-4471")
    assert "m1" in json.dumps([t["ids"] for t in stack.turns()])
    stack.r.delete("test:turns")  # the scripted model's own record of what it saw

    assert await inbox.accept(deletion("ann", "m1")) == "recorded"
    await stack.wait_for(lambda: not stack.r.exists(K.changes(group)) and
                         bool(redactions(root)), what="the redaction")
    await stack.wait_for(lambda: aof_idle(stack.r), what="the AOF rewrite")
    for word in ("kestrel-4471", "combination"):
        assert files_holding(root, word) == [], word
        assert index_hits(stack.data_dir, group, word) == []
        assert {k.decode() for k in stack.r.scan_iter(count=1000)
                if word.encode() in (stack.r.dump(k) or b"").lower()} == set(), word
        assert files_holding(stack.valkey.data_dir, word) == [], word
    episodes = "".join(p.read_text() for p in (root / "episodes").rglob("*.md"))
    assert f"what is my {REDACTED_MARKER} for?" in episodes and "Bot: ack m2" in episodes
    chunks = [e["text"] for e in stack.chat_events("ann") if e.get("type") == "chunk"]
    assert chunks == [f"ack m1 | SEEN: {REDACTED_MARKER} {REDACTED_MARKER}", "ack m2 m3"]
    with closing(open_memory(stack.data_dir, group, backend="file", watch="poll")) as mem:
        fact = mem.records({"include_superseded": True, "kind": "fact"})
    assert [(f.id, f.metadata.get("superseded_reason")) for f in fact] == \
        [("fact-m3", "source deleted")]  # drawn from a reply that quoted it


async def answered_with(stack: Stack, text: str, reply: str, chat: str = "ann") -> Inbox:
    """As ``answered``, for a reply other than the plain ack."""
    gw = await stack.start_gateway()
    assert gw.inbox is not None
    stack.start_workers(1)
    assert (await stack.ask(chat, chat, text, message_id="m1")).reply == reply
    await stack.settled(f"local:{chat}")
    return gw.inbox


def test_a_redaction_drops_the_local_models_saved_prompts(ctx: WorkerContext) -> None:
    # a state saved from a prompt that held the words (workers/local_states.py), and
    # another chat's: the files are a cache, all of them go
    group = "local:ann"
    deleted_m1(ctx, group, SECRET)
    saved = states_dir(ctx.settings.data_dir) / "model-x"
    saved.mkdir(parents=True)
    (saved / "a.json").write_text(json.dumps({"chat": SECRET}), encoding="utf-8")
    (saved / "a.bin").write_bytes(SECRET.encode())
    (saved / "b.json").write_text(json.dumps({"chat": "another chat"}), encoding="utf-8")
    assert redact_group(group, ctx=ctx)["end"] == "redacted"
    assert not states_dir(ctx.settings.data_dir).exists()

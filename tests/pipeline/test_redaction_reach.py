"""Redaction reaches the corners of Redis that keep a message's words besides its text:
a voice note's transcript (``Attachment.transcript``), kept while the message waits in
the group's lists or in the extraction queue; the errors a failed turn left (its
``last_error``, the dead-letter log's ``why``, the ``retrying`` note), which may quote
them. Real Valkey, the redaction job called in-process."""

from __future__ import annotations

import json

from channels.models import Attachment, Inbound
from gateway.queue import Keys, encode_entry, parse_entry
from memory_store.maintenance import REDACTED_MARKER
from tests.pipeline.conftest import deleted_m1
from workers.context import WorkerContext
from workers.redaction import redact_group

K = Keys()
GROUP = "local:ann"
SECRET = "my door code is 4417 Zanzibar"


def test_a_deletions_words_leave_a_held_voice_notes_transcript(ctx: WorkerContext) -> None:
    r = ctx.redis
    deleted_m1(ctx, GROUP, SECRET)
    voice = Attachment(id="v1", type="audio", mime="audio/ogg", stored="ab" * 32 + ".ogg",
                       transcript="voice note, transcribed: it is Zanzibar, I said")
    note = Inbound(channel="local", chat_id="ann", is_group=False, sender_id="ann",
                   sender_name="Ann", message_id="m2", text="", attachments=[voice])
    held = f"8 {encode_entry(note.model_dump_json(), False)}"
    r.rpush(K.context(GROUP), held)
    r.rpush(K.extractions(GROUP), json.dumps({"turn_id": "turn-c", "entries": [held]}))

    assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"

    [kept] = r.lrange(K.context(GROUP), 0, -1)
    [queued] = json.loads(r.lindex(K.extractions(GROUP), 0) or b"{}")["entries"]
    for raw in (kept.decode(), queued):
        [att] = parse_entry(raw).msg["attachments"]
        assert att["transcript"] == f"voice note, transcribed: it is {REDACTED_MARKER}, I said"
        assert att["stored"] == voice.stored  # the file's name is no text


def test_a_deletions_words_leave_the_errors_failed_turns_left(ctx: WorkerContext) -> None:
    """A dead-lettered turn and one being retried recorded errors quoting the words
    (a model's complaint about its input): after the redaction none holds them; the
    records keep their turn ids, counts and times; another group's are untouched."""
    r = ctx.redis
    deleted_m1(ctx, GROUP, SECRET)
    why = "ValidationError: input 'it is Zanzibar' is not valid"
    dead = {"turn_id": "turn-d", "at": 1.0, "why": f"3 attempts; last error {why}",
            "count": 1}
    r.rpush(K.dead_log(GROUP), json.dumps(dead))
    r.hset(K.turn("turn-d"), mapping={"last_error_class": "ValidationError",
                                      "last_error": why, "attempts": "3"})
    r.hset(K.turn("turn-r"), mapping={"last_error_class": "ValidationError",
                                      "last_error": why, "attempts": "2"})
    retrying = {"turn_id": "turn-r", "attempts": 2, "at": 2.0, "error": why}
    r.hset(K.retrying, mapping={GROUP: json.dumps(retrying),
                                "local:bob": json.dumps({**retrying, "turn_id": "turn-b"})})
    r.rpush(K.dead_log("local:bob"), json.dumps(dead))

    assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"

    scrubbed = f"ValidationError: input 'it is {REDACTED_MARKER}' is not valid"
    [log] = [json.loads(x) for x in r.lrange(K.dead_log(GROUP), 0, -1)]
    assert log == {**dead, "why": f"3 attempts; last error {scrubbed}"}
    for turn in ("turn-d", "turn-r"):
        assert r.hget(K.turn(turn), "last_error") == scrubbed.encode(), turn
    assert json.loads(r.hget(K.retrying, GROUP) or b"{}") == {**retrying, "error": scrubbed}
    assert json.loads(r.hget(K.retrying, "local:bob") or b"{}")["error"] == why
    assert json.loads(r.lindex(K.dead_log("local:bob"), 0) or b"{}") == dead


def test_a_redaction_waits_for_messages_held_for_their_files(ctx: WorkerContext) -> None:
    """A message held while its files download (``mediahold:{g}``) quotes the deleted
    one: the redaction yields until it has gone on to its turn, as it does for the
    mailbox, so its words are taken out of memory and the lists once it got there."""
    r = ctx.redis
    deleted_m1(ctx, GROUP, SECRET)
    quoting = Inbound(channel="local", chat_id="ann", is_group=False, sender_id="ann",
                      sender_name="Ann", message_id="m3", text="see above",
                      reply_to_id="m1", reply_to_text=SECRET,
                      attachments=[Attachment(id="f1", type="image")])
    r.rpush(K.media_hold(GROUP), json.dumps({"msg": json.loads(quoting.model_dump_json()),
                                             "disposition": "engage"}))
    assert redact_group(GROUP, ctx=ctx)["end"] == "rescheduled"
    assert r.llen(K.changes(GROUP)) == 1  # nothing applied yet
    r.delete(K.media_hold(GROUP))  # the media job let it on to the mailbox's turn
    assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"

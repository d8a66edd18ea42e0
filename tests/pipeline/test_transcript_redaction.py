"""Redaction reaches what a machine heard: a voice note's transcript, kept in its
message's attachment (``Attachment.transcript``) while the message waits in the group's
lists or in the extraction queue, loses a deleted message's words as its text would.
Real Valkey, the redaction job called in-process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from channels.models import Attachment, Inbound
from gateway.config import load_worker_settings
from gateway.queue import Keys, encode_entry, parse_entry
from memory_store.maintenance import MARKER
from tests.pipeline.conftest import Valkey, write_config
from workers.context import WorkerContext
from workers.redaction import redact_group

K = Keys()
GROUP = "local:ann"
SECRET = "my door code is 4417 Zanzibar"


@pytest.fixture
def ctx(tmp_path: Path, valkey: Valkey) -> Iterator[WorkerContext]:
    settings = load_worker_settings(write_config(tmp_path / "pnc.toml", valkey.url))
    c = WorkerContext(settings, redis.Redis.from_url(valkey.url))
    yield c
    c.close()


def test_a_deletions_words_leave_a_held_voice_notes_transcript(ctx: WorkerContext) -> None:
    r = ctx.redis
    _, mem = ctx.group_memory(GROUP)
    mem.write_sync(f"Turn in {GROUP}.\n\n- [2026-11-30 10:00:00] Ann (ann): {SECRET}\n\n"
                   "Bot: noted\n", kind="episode",
                   metadata={"id": "turn-x", "message_ids": ["m1"], "trust": 0.8,
                             "source": f"{GROUP}:msg/m1"})
    voice = Attachment(id="v1", type="audio", mime="audio/ogg", stored="ab" * 32 + ".ogg",
                       transcript="voice note, transcribed: it is Zanzibar, I said")
    note = Inbound(channel="local", chat_id="ann", is_group=False, sender_id="ann",
                   sender_name="Ann", message_id="m2", text="", attachments=[voice])
    held = f"8 {encode_entry(note.model_dump_json(), False)}"
    r.rpush(K.context(GROUP), held)
    r.rpush(K.extractions(GROUP), json.dumps({"turn_id": "turn-c", "entries": [held]}))
    r.rpush(K.changes(GROUP), json.dumps(
        {"kind": "deletion", "original_id": "m1", "event_id": "d1", "account": "default"}))

    assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"

    [kept] = r.lrange(K.context(GROUP), 0, -1)
    [queued] = json.loads(r.lindex(K.extractions(GROUP), 0) or b"{}")["entries"]
    for raw in (kept.decode(), queued):
        [att] = parse_entry(raw).msg["attachments"]
        assert att["transcript"] == f"voice note, transcribed: it is {MARKER}, I said"
        assert att["stored"] == voice.stored  # the file's name is no text

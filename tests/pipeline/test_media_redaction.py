"""A platform deletion of a message with a file, and a ``/forget`` naming it, remove the
file from the chat's ``attachments/`` in the redaction job (workers/mediaforget.py).
Real Valkey, the job called in-process."""

from __future__ import annotations

import json

from gateway.intake import GroupFiles
from gateway.media import Received, Stored, put, sniff
from gateway.queue import Keys
from tests.media.files import pdf, png
from workers.context import WorkerContext
from workers.redaction import redact_group

K = Keys()
GROUP = "local:ann"


def _stored(ctx: WorkerContext, data: bytes, mid: str, name: str) -> Stored:
    return put(GroupFiles(ctx.settings.data_dir), GROUP, data, sniff(data),
               Received("local", mid, name, 1.0))


def _episode(ctx: WorkerContext, lines: str, ids: list[str]) -> None:
    _, mem = ctx.group_memory(GROUP)
    mem.write_sync(f"Turn in {GROUP}.\n\n{lines}\nBot: ok\n", kind="episode",
                   metadata={"id": "turn-f", "message_ids": ids, "trust": 0.8,
                             "source": f"{GROUP}:msg/" + ",".join(ids)})


def _files(ctx: WorkerContext) -> list[str]:
    folder = GroupFiles(ctx.settings.data_dir).attachments(GROUP)
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_a_deleted_message_takes_its_file_along(ctx: WorkerContext) -> None:
    image, doc = _stored(ctx, png(), "m1", "cat.png"), _stored(ctx, pdf(), "m2", "a.pdf")
    _episode(ctx, f"- [2026-12-01 10:00:00] Ann (ann): look [file {image.stored}]\n"
                  f"- [2026-12-01 10:00:01] Ann (ann): and [file {doc.stored}]\n",
             ["m1", "m2"])
    ctx.redis.rpush(K.changes(GROUP), json.dumps(
        {"kind": "deletion", "original_id": "m1", "event_id": "d1", "account": "default"}))
    assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"
    assert _files(ctx) == sorted([doc.stored, f"{doc.sha256}.json"])


def test_forget_removes_the_files_its_words_name(ctx: WorkerContext) -> None:
    image, doc = _stored(ctx, png(), "m1", "holiday.png"), _stored(ctx, pdf(), "m2",
                                                                    "lease contract.pdf")
    _episode(ctx, f"- [2026-12-01 10:00:00] Ann (ann): my Zanzibar trip [file {image.stored}]\n"
                  f"- [2026-12-01 10:00:01] Ann (ann): here [file {doc.stored}]\n",
             ["m1", "m2"])
    ctx.redis.rpush(K.forget(GROUP), json.dumps({"id": "forget-1", "phrase": "zanzibar",
                                                 "by": "local:ann", "at": 1}))
    ctx.redis.rpush(K.forget(GROUP), json.dumps({"id": "forget-2", "phrase": "lease contract",
                                                 "by": "local:ann", "at": 1}))
    assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"
    assert _files(ctx) == []

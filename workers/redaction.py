"""Redaction: what was deleted on its platform, or forgotten with ``/forget``, leaves the
group's memory and the queue.

Requests wait in Redis: deletions and edits of messages a turn already took in
``changes:{g}`` (``gateway/intake/_changes.py``; an edit is applied only when its sender wrote
the episode line, else dropped with a warning; edits go before deletions, so a
deleted message stays deleted), ``/forget`` phrases in
``forget:{g}`` (``gateway/intake/_memorydesk.py``). The gateway enqueues ``redact_group`` for
each (``gateway.queue.enqueue_group_job``); one job applies all that wait, so a
duplicate job is harmless.

The job runs on the skeleton of the consolidation and extraction jobs
(``workers/groupjob.py``, with a policy that never gives up): it takes the SAME
group lock as the drain job, never runs during a turn, and yields (reschedules itself
``RESCHEDULE_DELAY`` s later with RQ's scheduler) while a drain is queued or messages
wait, in the mailbox or held for their files: the turn that is about to write an
episode goes first, so its episode is redacted too. Under the lock it

1. applies the edits to memory (``memory_store.maintenance._redact``), and reads (only) the words of
   the deleted messages from it (``message_lines``; their words:
   ``memory_store.maintenance._words``);
2. takes the words and the ``/forget`` phrases out of what Redis still holds
   (``scrub.lua``): an entry of a deleted message is removed from the context,
   mailbox, processing and dead-letter lists, any other entry holding the words gets
   them replaced by the marker, as do the group's turn state (``turn:{id}``'s kept
   reply, replayed by a retry; ``extract:{id}``'s stored answer; ``extractq:{g}``)
   and its entries in the outbox and the local channel's reply streams, which are
   rebuilt, and the arguments and output of its calls recorded for an admin's approval
   (``workers.redisscrub``; a call not run yet is withdrawn) and the errors failed
   turns left (dead-letter log, retry note, ``last_error``); an edited message's
   entries get the new text, and the old words (when long enough) become the new.
   Before memory is rewritten, so a retry after a crash anywhere still reads the words
   there;
3. rewrites memory for the deletions and ``/forget`` (episodes, the bot's replies,
   facts, entity and core files, one audit entry per request without the words),
   then scrubs the index once (``scrub_index``; again on a retry, so a failed scrub
   is not skipped) and drops the local model's saved prompt states, every chat's
   (``workers.local_states``: a cache);
4. removes the requests it applied (LREM of each exact record), last: a crash before
   that applies them again, which changes nothing the second time; in the same
   transaction an applied edit's new words are queued for fact extraction
   (``workers.extraction.edit_extraction_entry``), so what the edit states is filed
   as the facts of its old words were retired;
5. has Redis rewrite its persistence from the data set as it is now: the append-only
   file keeps every command ever run, the original words included, until
   ``BGREWRITEAOF`` replaces it (and an RDB snapshot, when configured, is saved anew).
   A server that refuses (a managed Redis without CONFIG, a rewrite already running)
   is logged: its next rewrite drops the words.

A DM linked to a person also reaches the persons' memories its turns wrote
(``Keys.person_memories``, kept after ``/link off``, under their locks); there a message
id is matched only in what this DM wrote (``chat`` of ``redact_message``, ``edit_message``,
``message_lines``, ``replies_holding``): ids are unique within one chat only.

A redaction is never given up: a group busy ``MAX_RESCHEDULES`` times in a row is
tried every ``SLOW_DELAY`` seconds from then on (a warning says so), until it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

import redis

from gateway.queue import (
    REDACT_JOB,
    Entry,
    GroupQueue,
    Keys,
    as_str,
    encode_entry,
    parse_entry,
)
from memory_store.maintenance import (
    ECHO_MIN_CHARS,
    REDACTED_MARKER,
    WordFinder,
    edit_message,
    message_lines,
    redact_message,
    redact_phrase,
    replies_holding,
    scrub_index,
    scrub_value,
    validated_phrase,
    words_matcher,
    words_pattern,
)
from workers.context import WorkerContext
from workers.extraction import edit_extraction_entry, schedule_extraction
from workers.groupjob import GiveUp, GroupJob, JobSpec
from workers.local_states import drop_states
from workers.lock import GroupLock
from workers.mediaforget import forget_files
from workers.redisscrub import (
    scrub_approvals,
    scrub_failures,
    scrub_streams,
    scrub_turn_state,
    with_words,
)
from workers.taskforget import forget_tasks

log = logging.getLogger(__name__)

#: delay before a job that found the group busy tries again, seconds
RESCHEDULE_DELAY = 5
#: busy this many times in a row: from then on, tried every ``SLOW_DELAY`` seconds
MAX_RESCHEDULES = 120
SLOW_DELAY = 300
#: lifetime of the ``redact:{g}`` key the lock renews while the job runs, seconds
LEASE_TTL = 3600
#: never given up; the lock's key (``redact:{g}``) is dropped even after a failure (RQ's
#: Retry runs the job again; the gateway enqueues a new one for each request anyway)
REDACTION = JobSpec(REDACT_JOB, "redaction", Keys.redacting, LEASE_TTL,
                    GiveUp(RESCHEDULE_DELAY, MAX_RESCHEDULES, slow=SLOW_DELAY),
                    track=False, keep_on_error=False)


def _records(client: redis.Redis, key: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for raw in client.lrange(key, 0, -1):  # type: ignore[union-attr]
        text = as_str(raw)
        try:
            rec = json.loads(text)
        except ValueError:
            log.warning("unreadable record in %s skipped", key)
            continue
        if isinstance(rec, dict):
            out.append((text, rec))
    return out


#: an edit the job applies: ``(account, message id)`` -> (author's sender id, new text)
Edits = dict[tuple[str, str], tuple[str, str]]
#: old words -> new words of the applied edits, replaced wherever Redis holds them
Rewords = Sequence[tuple[str, str]]


def reworded(value: Any, rewords: Rewords) -> Any:
    """``value`` (any JSON value) with each edit's old words (case-insensitive) replaced
    by its new ones."""
    for old, new in rewords:
        pat = words_pattern([old])
        if pat is not None:
            value = scrub_value(value, pat, new)
    return value


def _own_words(old: str) -> re.Pattern[str]:
    """What stands for an edited message's old text in its own platform event: the
    text anywhere when it is long enough, else only a value that is exactly it."""
    if len(old) >= ECHO_MIN_CHARS:
        return re.compile(re.escape(old))
    return re.compile(r"\A" + re.escape(old) + r"\Z")


def held_changes(gq: GroupQueue, deleted: set[tuple[str, str]], texts: list[str],
                 edits: Edits | None = None, rewords: Rewords = (),
                 phrases: Sequence[str] = ()) -> tuple[list[tuple[str, str | None]],
                                                      WordFinder | None]:
    """(entry, replacement or None: remove) for every held entry of a deleted message
    (``(account, message id)``), of an edited one (when its sender is the edit's: it
    gets the new text, and its platform event the new words), or holding the words of
    one of the deleted ``texts`` (``memory_store.maintenance._words``) or one of ``phrases`` (they
    become the marker) or an edit's old words (they become its new); and the matcher of
    those words, for the rest of Redis.

    Two things do not depend on ``texts``, which a retry after a crash between the
    memory rewrite and this step no longer has (memory holds only the marker by then):
    a held copy of a deleted message lends its own text to the words, and a reply's
    quote of a deleted message (``reply_to_id``) becomes the marker by its id."""
    held: list[tuple[str, Entry]] = []
    texts = list(texts)
    for raw in gq.held_entries():
        try:
            entry = parse_entry(raw)
        except ValueError:
            continue
        held.append((raw, entry))
        own = entry.msg.get("text")
        if _key(entry.msg, "message_id") in deleted and isinstance(own, str):
            texts.append(own)
    pat = words_matcher(texts, phrases)
    pairs: list[tuple[str, str | None]] = []
    for raw, entry in held:
        msg = entry.msg
        key = _key(msg, "message_id")
        if key in deleted:
            pairs.append((raw, None))
            continue
        new_msg = dict(msg)
        if _key(msg, "reply_to_id") in deleted and msg.get("reply_to_text"):
            new_msg["reply_to_text"] = REDACTED_MARKER
        sender, text = (edits or {}).get(key, (None, None))
        old = msg.get("text")
        if text is not None and str(msg.get("sender_id")) == sender and \
                isinstance(old, str) and old != text:
            new_msg["text"] = text
            if "raw" in msg and old:
                new_msg["raw"] = scrub_value(msg["raw"], _own_words(old), text)
        if rewords:
            new_msg = with_words(new_msg, lambda v: reworded(v, rewords))
        if pat is not None:
            new_msg = with_words(new_msg, lambda v: scrub_value(v, pat))
        if new_msg != msg:
            pairs.append((raw, f"{entry.seq} {encode_entry(json.dumps(new_msg), entry.engaged)}"))
    return pairs, pat


def _key(msg: dict[str, Any], field: str) -> tuple[str, str]:
    """(account, the message id in ``field``) of a held message (or a change record)."""
    return (str(msg.get("account", "default")), str(msg.get(field)))


def rewrite_persistence(client: redis.Redis) -> list[str]:
    """Rewrite Redis's append-only file (and RDB snapshot) from the current data set,
    so removed words are not kept in its history. Returns what was started."""
    started: list[str] = []
    try:
        raw: Any = {**client.config_get("appendonly"), **client.config_get("save")}
    except redis.ResponseError as err:
        log.warning("redaction: cannot read the server's persistence settings (%s); its "
                    "files may keep removed words until they are rewritten", err)
        return started
    conf = {as_str(k): as_str(v) for k, v in raw.items()}
    for wanted, name, call in ((conf.get("appendonly") == "yes", "aof", client.bgrewriteaof),
                               (bool(conf.get("save", "").strip()), "rdb", client.bgsave)):
        if not wanted:
            continue
        try:
            call()
            started.append(name)
        except redis.ResponseError as err:
            log.warning("redaction: %s rewrite not started (%s); the next one drops the "
                        "removed words", name, err)
    return started


def _person_memories(client: redis.Redis, keys: Keys, group: str) -> list[str]:
    """The linked persons' memory keys the DM ``group``'s turns wrote to, in lock order."""
    return sorted(as_str(m) for m in client.smembers(keys.person_memories(group)))


def redact_group(group: str, **job: Any) -> dict[str, Any]:
    """Apply every waiting deletion and ``/forget`` of ``group`` under the group lock.
    ``job`` are the keyword arguments of ``workers.groupjob.GroupJob``. Returns a JSON
    summary: ``end`` is "redacted" (with the requests applied, the memory files changed
    and the queue entries scrubbed) or "rescheduled" (with the new job)."""
    run = GroupJob(REDACTION, group, **job)

    def body() -> dict[str, Any]:
        with contextlib.ExitStack() as held:
            # a linked person's DM wrote to their own directory: its lock after the
            # group's, as a turn takes them
            for person in _person_memories(run.client, run.keys, group):
                held.enter_context(run.person(person))
            summary = _apply(run.ctx, run.keys, group, run.lock, run.kwargs)
        log.info("redacted %s: %d requests, %d files, %d queue entries", group,
                 summary["requests"], summary["files"], summary["entries"])
        return run.summary("redacted", **summary)

    return run.run(body)


def _apply(ctx: WorkerContext, keys: Keys, group: str, lock: GroupLock,
           job: dict[str, Any]) -> dict[str, int]:
    client = ctx.redis
    gq = GroupQueue(client, keys, group)
    # the chat's own memory, and the linked persons' its DM turns wrote (their locks
    # held), each with the chat whose message ids are matched in it: a person's memory
    # also holds their other DMs' messages, whose ids may be the same (ids are unique
    # only within a chat), so there an id counts only with this chat in its source
    scoped = [(ctx.group_memory(key)[1], None if key == group else group)
              for key in [group, *_person_memories(client, keys, group)]]
    memories = [memory for memory, _ in scoped]
    changes = _records(client, keys.changes(group))
    deletions = [(raw, rec) for raw, rec in changes
                 if rec.get("kind") == "deletion" and rec.get("original_id")]
    edits = [(raw, rec) for raw, rec in changes if rec.get("kind") == "edit" and
             rec.get("original_id") and isinstance(rec.get("text"), str)]
    forgets = [(raw, rec) for raw, rec in _records(client, keys.forget(group))
               if isinstance(rec.get("phrase"), str)]
    deleted = {_key(rec, "original_id") for _, rec in deletions}
    # the deleted messages' texts: their words (memory_store.maintenance._words)
    texts: list[str] = []
    phrases: list[str] = []  # the /forget phrases
    turns: set[str] = set()
    edited: Edits = {}
    rewords: list[tuple[str, str]] = []
    extract: list[str] = []  # extractq entries for the edits' new words
    files = 0
    for _, rec in edits:  # before the deletions: a deleted message stays deleted
        lock.check()
        mid, text, sender = str(rec["original_id"]), rec["text"], str(rec.get("sender_id"))
        outs = [edit_message(memory, mid, text, sender_id=sender,
                             request=f"edit:{rec.get('event_id', mid)}",
                             actor=f"edit:{rec.get('channel')}:{sender}", scrub=False,
                             chat=chat)
                for memory, chat in scoped]
        if any(out.refused for out in outs):  # logged; the record is dropped with the others
            continue
        edited[_key(rec, "original_id")] = (sender, text)
        if (entry := edit_extraction_entry(ctx.settings, group, rec)) is not None:
            extract.append(entry)
        for out in outs:
            rewords += [(t, text) for t in out.removed
                        if len(t) >= ECHO_MIN_CHARS and t.casefold() not in text.casefold()]
            turns.update(out.records)
            files += len(set(out.paths))
    # Redis before memory for deletions and /forget: the words are read from memory
    # first, so a retry after a crash anywhere below still knows them
    replied: dict[str, list[str]] = {}  # deleted id -> bot replies that repeated it
    for _, rec in deletions:
        mid = str(rec["original_id"])
        lines = [line for memory, chat in scoped
                 for line in message_lines(memory, mid, chat)]
        texts += lines
        if (own := words_matcher(lines)) is not None:  # facts drawn from replies to those
            replied[mid] = [p for memory, chat in scoped
                            for t in replies_holding(memory, own, chat)
                            for p in gq.delivered(t)]
    for _, rec in forgets:
        with contextlib.suppress(ValueError):  # logged and dropped below
            phrases.append(validated_phrase(rec["phrase"]))
    lock.check()
    # the files too, while the episode lines still hold the words (workers/mediaforget)
    files += len(forget_files(ctx.settings.data_dir, group, memories,
                              {mid for _, mid in deleted}, phrases))
    pairs, pat = held_changes(gq, deleted, texts, edited, rewords, phrases)
    entries = gq.scrub(pairs)
    if pat is not None or rewords:
        # every turn of the group, not only those this attempt rewrote: a retry after a
        # crash finds memory already redacted
        if pat is not None:
            turns |= {r.id for memory in memories
                      for r in memory.records({"kind": "episode"})}
        entries += scrub_turn_state(gq, (t for t in turns if t.startswith("turn-")), pat,
                                    lambda text: reworded(text, rewords))
    if pat is not None:  # words of a deletion or a /forget phrase
        entries += scrub_streams(gq, pat)
        entries += scrub_approvals(gq, pat)  # a call's arguments and output
        entries += scrub_failures(gq, pat)  # errors that may quote a message
        files += forget_tasks(client, keys, ctx.settings, group, pat)  # and tasks holding them
    for _, rec in deletions:
        lock.check()
        mid = str(rec["original_id"])
        for memory, chat in scoped:
            out = redact_message(memory, mid, request=f"deletion:{rec.get('event_id', mid)}",
                                 actor=f"deletion:{rec.get('channel')}:{rec.get('sender_id')}",
                                 scrub=False, replied=replied.get(mid, ()), chat=chat)
            files += len(set(out.paths))
    for _, rec in forgets:
        lock.check()
        try:
            for memory in memories:
                out = redact_phrase(memory, rec["phrase"], request=str(rec.get("id", "forget")),
                                    actor=f"forget:{rec.get('by', '?')}", scrub=False)
                files += len(set(out.paths))
        except ValueError:
            log.warning("forget request %s in %s has no usable phrase; dropped",
                        rec.get("id"), group)
            continue
    if deletions or forgets or edits:
        # once for all requests, and also when a retry finds the files already redacted
        # (an earlier attempt failed after rewriting them, before or while scrubbing)
        for memory in memories:
            with memory.group.lock():
                scrub_index(memory)
        drop_states(ctx.settings.data_dir)  # the local model's saved prompts held the words
    with client.pipeline(transaction=True) as pipe:
        for raw, _ in deletions + edits:
            pipe.lrem(keys.changes(group), 1, raw)
        for raw, _ in forgets:
            pipe.lrem(keys.forget(group), 1, raw)
        for entry in extract:  # with the LREM: an applied edit is extracted exactly once
            pipe.rpush(keys.extractions(group), entry)
        pipe.execute()
    if extract:
        schedule_extraction(client, group, ctx.settings, queue=job["queue"],
                            prefix=keys.prefix, lock_ttl=job["lock_ttl"],
                            retries=job["retries"])
    if deletions or forgets or edits:
        rewrite_persistence(client)
    return {"requests": len(deletions) + len(forgets) + len(edits), "files": files,
            "entries": entries}

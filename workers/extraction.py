"""Entity updates after every turn: the model lists a batch's durable facts, we file them.

Policy. When extraction is on (``extraction_enabled``), the drain job's finish script
(``gateway/queue/lua/finish.lua``) queues each turn whose episode it marks written, with
its batch, in ``extractq:{g}``, atomically with the mark; then ``schedule_extraction``
enqueues ``extract_group`` unless one is pending for the group (``extracting:{g}``, SET
NX with a TTL, as consolidation does). So extraction is never on the reply's path: the
reply was published before the turn was queued here.

The job (``extract_group``) yields to the group's turns exactly as consolidation does
(the skeleton of ``workers/groupjob.py``): with a drain queued or running, or messages waiting, it
reschedules itself ``RESCHEDULE_DELAY`` seconds later and returns. One job takes every
queued turn of the group (turns that come fast are extracted together). For each turn:

1. ask the model, *without* the group lock (a message arriving now is not held up by a
   model call), for ``ExtractedFacts`` (structured output: the output type), showing it
   the batch and the known facts its text finds in memory; the answer is stored in
   ``extract:{turn}`` before anything is written, so a retried job writes what the first
   attempt decided and asks nothing again;
2. under the group lock: each fact gets its trust from structure (``fact_attribution``:
   at most the least trusted message that could have introduced it, never the model's
   claim), a fact already in its entity file is a no-op, the others are written (ids
   from the turn id and the text, so a rewrite is a no-op) and reconciled
   (``memory_store.maintenance.reconcile_facts``: the known facts it updates or contradicts
   are superseded with ``valid_to``, never by a less trusted fact; the entity file
   ``entities/entity-<slug>.md`` is written and indexed); then ``done`` is set.

The same answer flags the messages that corrected the bot, by id; each becomes a lesson
in ``reflections/`` at its author's trust (``workers.reflection.correction_lessons``).
Extraction never writes ``CLAUDE.md`` or ``user_profile.md`` (promotion into core memory
is ``workers.core_rules``' business, with its own rules). A model that cannot do
structured output (the local demo model) is skipped with one log line, never a crash; a
turn whose extraction keeps failing is given up after ``MAX_ATTEMPTS``. What the model is
asked and what each fact's trust is: ``workers.facts``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import redis
from pydantic import ValidationError

from channels.models import Inbound
from channels.redact import redact
from gateway.config import Settings, extraction_enabled
from gateway.queue import (
    DEFAULT_QUEUE,
    EXTRACT_JOB,
    TURN_STATE_TTL,
    Keys,
    as_str,
    encode_entry,
)
from gateway.queue.identity import Identities
from memory_store import BaseMemory, MemoryNotFound
from memory_store.maintenance import entity_slug, normalized_words, reconcile_facts
from workers.facts import (
    ExtractedFacts,
    ask_model,
    fact_attribution,
    find_known,
    render_request,
)
from workers.groupjob import GiveUp, GroupJob, JobSpec, enqueue_once
from workers.identity import memory_key
from workers.maintenance import DEFAULT_RETRIES, MAX_RESCHEDULES, PENDING_TTL, RESCHEDULE_DELAY
from workers.metering import FACTS, BudgetSpent, charging
from workers.reflection import correction_lessons
from workers.tools import ABOUT_MAX_CHARS, FACT_MAX_CHARS, fact_id
from workers.turn import Batch, parse_batch

log = logging.getLogger(__name__)

#: a turn whose extraction failed this many times is given up (logged, nothing written)
MAX_ATTEMPTS = 3
#: facts taken from one answer
FACTS_MAX = 20
EXTRACTION = JobSpec(EXTRACT_JOB, "extraction", Keys.extracting, PENDING_TTL,
                     GiveUp(RESCHEDULE_DELAY, MAX_RESCHEDULES))

# -- policy -------------------------------------------------------------------------------

_told: set[str] = set()


def extraction_entry(settings: Settings, batch: Batch) -> str | None:
    """The ``extractq`` entry of a turn over ``batch`` (None: extraction is off; said
    once per process when it was asked for but the model cannot do it)."""
    on, why = extraction_enabled(settings)
    if not on:
        if settings.memory.extract is True and why not in _told:
            _told.add(why)
            log.info("fact extraction skipped: %s", why)
        return None
    revision = {"revision": batch.revision} if batch.revision else {}
    return json.dumps({"turn_id": batch.turn_id, "entries": batch.raw, **revision})


def edit_extraction_entry(settings: Settings, group: str, change: dict[str, Any]
                          ) -> str | None:
    """The ``extractq`` entry for the new words of an edited message (a recorded edit,
    ``gateway/intake/_changes.py``), so facts the edit states are filed as its old words' are
    retired: a batch of that one message (its own id: facts cite it, and a later
    deletion of the message retires them) with the edit's event id as its revision
    (another turn id, so a redelivered edit is extracted once). None when extraction
    is off, or the record predates the fields it needs."""
    if not isinstance(change.get("is_group"), bool) or not change.get("sender_name"):
        return None
    try:
        msg = Inbound(channel=change["channel"], account=change.get("account", "default"),
                      chat_id=change["chat_id"], is_group=change["is_group"],
                      sender_id=change["sender_id"], sender_name=change["sender_name"],
                      message_id=change["original_id"], text=change["text"],
                      received_at=change["at"])
    except (KeyError, ValidationError) as err:
        log.warning("edit of %s in %s: not extracted (%s)", change.get("original_id"),
                    group, err)
        return None
    raw = f"1 {encode_entry(msg.model_dump_json(), False)}"
    return extraction_entry(settings, parse_batch(group, [raw],
                                                  revision=str(change.get("event_id", ""))))


def schedule_extraction(
    client: redis.Redis,
    group: str,
    settings: Settings,
    *,
    queue: str = DEFAULT_QUEUE,
    prefix: str = "pnc:",
    lock_ttl: float = 30.0,
    retries: int = DEFAULT_RETRIES,
) -> str | None:
    """Enqueue the extraction job of ``group`` unless one is pending; returns its id, or
    None. Never raises: a scheduling problem must not stop the group's turns."""
    try:
        return enqueue_once(client, EXTRACTION, group, queue=queue, prefix=prefix,
                            lock_ttl=lock_ttl, timeout=settings.worker.job_timeout,
                            retries=retries)
    except Exception as exc:
        log.warning("could not schedule fact extraction of %s: %r", group, exc)
        return None


# -- writing ------------------------------------------------------------------------------

def _in_entity_file(memory: BaseMemory, about: str, record_id: str, text: str) -> bool:
    try:
        current_file = memory.read_sync(f"entity-{entity_slug(about)}")
    except MemoryNotFound:
        return False
    return any(isinstance(e, dict) and not e.get("superseded_by") and (
        e.get("id") == record_id
        or normalized_words(str(e.get("text", ""))) == normalized_words(text))
        for e in current_file.metadata.get("facts") or [])


def apply_facts(memory: BaseMemory, batch: Batch, result: ExtractedFacts,
                known: dict[str, tuple[str, str, float]], settings: Settings,
                now: datetime) -> list[str]:
    """Write and reconcile ``result``'s facts (call under the group lock). Idempotent for
    one turn and result. Returns the ids of the facts (and correction lessons) written."""
    secret = settings.model.secret
    tid, written, replaced = batch.turn_id, [], []
    entities: set[str] = set()
    for f in result.facts[:FACTS_MAX]:
        text, about = " ".join(f.fact.split()), " ".join(f.about.split())[:ABOUT_MAX_CHARS]
        if not text or not about or len(text) > FACT_MAX_CHARS:
            continue
        if secret and secret in f"{text} {about}":
            log.warning("extraction %s: dropped a fact containing a secret", tid)
            continue
        record_id = fact_id(tid, text, about)
        if _in_entity_file(memory, about, record_id, text):
            continue  # known already: nothing to do
        att = fact_attribution(batch.group, tid, batch.messages, text, f.message_ids, about,
                               settings.admins)
        trust = att.trust
        if not att.proven and known:
            # not in a cited message: it may come from the known facts the model read
            trust = min(trust, *(t for _, _, t in known.values()))
        memory.write_sync(text, kind="entity", metadata={
            "id": record_id, "source": att.source, "message_ids": att.message_ids,
            "participants": att.participants, "trust": trust, "turn_id": tid,
            "created": now.isoformat(), "actor": f"extract:{tid}", "entity": about,
            "entity_kind": f.kind, "relation": f.relation, "tags": [about]})
        written.append(record_id)
        entities.add(about)
        if f.relation != "new":  # only facts the model saw, about the same entity
            replaced += [(old, record_id) for old in f.replaces
                         if old in known and entity_slug(known[old][0]) == entity_slug(about)]
    if entities:
        reconcile_facts(memory, entities, replaced)
    # the messages that corrected the bot, by id: lessons at their author's trust
    written += correction_lessons(
        memory, group=batch.group, turn_id=tid, messages=batch.messages, known=known,
        corrections=[(c.message_id, c.lesson, c.contradicts) for c in result.corrections],
        admins=settings.admins, now=now, secret=secret)
    return written


# -- the job ------------------------------------------------------------------------------

def _queued(client: redis.Redis, keys: Keys, group: str) -> list[tuple[str, Batch]]:
    """The group's queued turns (raw entry, batch), oldest first, each turn once; an
    unreadable entry is logged and dropped."""
    out: list[tuple[str, Batch]] = []
    seen: set[str] = set()
    raw_list: Any = client.lrange(keys.extractions(group), 0, -1)
    for raw in (as_str(x) for x in raw_list):
        try:
            item = json.loads(raw)
            batch = parse_batch(group, item["entries"], str(item.get("revision", "")))
            if batch.turn_id != item["turn_id"]:
                raise ValueError("turn id does not match its batch")
        except (ValueError, KeyError, TypeError, ValidationError) as err:
            log.error("extraction of %s: unreadable entry dropped: %s", group, err)
            client.lrem(keys.extractions(group), 1, raw)
            continue
        if batch.turn_id in seen:
            client.lrem(keys.extractions(group), 1, raw)
            continue
        seen.add(batch.turn_id)
        out.append((raw, batch))
    return out


def _stored(client: redis.Redis, key: str) -> ExtractedFacts | None:
    raw: Any = client.hget(key, "result")
    return None if raw is None else ExtractedFacts.model_validate_json(as_str(raw))


def _finish(client: redis.Redis, state: str, how: str, queue: str, raw: str) -> None:
    """Mark a turn's extraction done (``how``: 1, budget, gave-up) and take it off the
    group's queue in one transaction: no reader sees it done and still queued."""
    with client.pipeline() as pipe:
        pipe.hset(state, "done", how)
        pipe.expire(state, TURN_STATE_TTL)
        pipe.lrem(queue, 1, raw)
        pipe.execute()


def extract_group(group: str, **job: Any) -> dict[str, Any]:
    """Extract the facts of ``group``'s queued turns. ``job`` are the keyword arguments
    of ``workers.groupjob.GroupJob``. Returns a JSON summary: ``end`` is "extracted"
    (with ``turns`` and ``facts`` written), "skipped" (extraction is off),
    "rescheduled" (with the new ``job``) or "gave-up" (busy ``MAX_RESCHEDULES`` times)."""
    run = GroupJob(EXTRACTION, group, **job)
    ctx, client, keys = run.ctx, run.client, run.keys
    settings, prefix = ctx.settings, keys.prefix
    on, why = extraction_enabled(settings)
    if not on:
        log.info("fact extraction of %s skipped: %s", group, why)
        client.delete(keys.extractions(group), run.lease)
        return run.summary("skipped", why=why)
    if run.busy():
        return run.reschedule()
    identities = Identities(settings.person_of, client, keys)
    secret = settings.model.secret
    ready: list[tuple[str, Batch, ExtractedFacts, dict[str, tuple[str, str, float]]]] = []
    for raw, batch in _queued(client, keys, group):
        state = keys.extraction(batch.turn_id)
        if client.hexists(state, "done"):
            client.lrem(keys.extractions(group), 1, raw)
            continue
        # the memory the batch's turn opened: a linked person's DM writes to theirs
        memory = ctx.group_memory(memory_key(identities, group, batch.messages))[1]
        known = find_known(memory, batch)
        result = _stored(client, state)
        if result is None:
            if run.busy():
                return run.reschedule()  # what was asked so far is stored; turns first
            try:
                with charging(client, settings.usage, group=group, person=None, kind=FACTS,
                              prefix=prefix):
                    answer = ctx.run(ask_model(settings, render_request(batch, known,
                                                                        settings.admins)))
            except BudgetSpent as spent:
                # skipped, not retried: a cap is not lifted by trying again
                log.warning("extraction of %s in %s skipped: %s", batch.turn_id, group, spent)
                _finish(client, state, "budget", keys.extractions(group), raw)
                continue
            except Exception as exc:
                attempts = int(client.hincrby(state, "attempts", 1))  # type: ignore[arg-type]
                client.expire(state, TURN_STATE_TTL)
                message = redact(f"{type(exc).__name__}: {exc}", secret)[:300]
                if attempts >= MAX_ATTEMPTS:
                    log.error("extraction of %s in %s given up after %d attempts: %s",
                              batch.turn_id, group, attempts, message)
                    _finish(client, state, "gave-up", keys.extractions(group), raw)
                else:
                    log.warning("extraction of %s in %s failed (attempt %d): %s",
                                batch.turn_id, group, attempts, message)
                continue
            # first answer wins: a concurrent duplicate job writes what this one stored
            client.hsetnx(state, "result", answer.model_dump_json())
            client.expire(state, TURN_STATE_TTL)
            result = _stored(client, state) or answer
        ready.append((raw, batch, result, known))

    def write() -> dict[str, Any]:
        written = 0
        for raw, batch, result, known in ready:
            run.lock.check()
            # a linked person's facts go to the directory all their DMs use: under
            # the person's lock too
            memory = memory_key(identities, group, batch.messages)
            with run.person(memory):
                ids = apply_facts(ctx.group_memory(memory)[1], batch, result, known,
                                  settings, datetime.now(UTC))
            written += len(ids)
            _finish(client, keys.extraction(batch.turn_id), "1", keys.extractions(group), raw)
            log.info("extraction of %s in %s: %d facts", batch.turn_id, group, len(ids))
        return run.summary("extracted", turns=len(ready), facts=written)

    if not ready:
        client.delete(run.lease)
        out = run.summary("extracted", turns=0, facts=0)
    else:  # the lease key is dropped after the write (kept on an exception: RQ retries)
        out = run.run(write)
        if out["end"] != "extracted":
            return out
    if client.llen(keys.extractions(group)):
        # turns queued meanwhile (their drain saw this job pending), or failed attempts
        schedule_extraction(client, group, settings, queue=run.kwargs["queue"],
                            prefix=prefix, lock_ttl=run.kwargs["lock_ttl"],
                            retries=run.kwargs["retries"])
    return out

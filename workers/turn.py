"""One agent turn over one batch, idempotent under retries.

A batch is what sat in the group's ``processing`` list: context and engaged messages,
each wrapped as ``{"seq": n, "engaged": bool, "msg": Inbound}``. The turn id is derived
from the batch's message ids, so a turn retried after a crash has the same id. Redis
keeps the turn's progress in ``turn:{id}``: once ``published`` is set (atomically with
the reply's XADD, and only while this worker holds the group lock) a retry never
publishes again and reuses the stored reply; once ``written`` is set the episode is not
written again (and ``memory_store`` dedupes the write by id besides).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from channels.models import Inbound, Outbound
from gateway.queue import Budget, GroupQueue, Keys, TurnRecord, events, parse_entry
from gateway.queue.identity import Configured, Identities
from memory_store import BaseMemory, GroupDirectory
from memory_store.files import notice_core_edits
from workers import media
from workers.agent import TurnError, TurnRequest, build_agent
from workers.approval_runs import run_approved
from workers.context import WorkerContext
from workers.host_tools import deadline_after, host_link
from workers.identity import memory_key, shared_profiles
from workers.lock import GroupLock, LockLost, PersonBusy, person_lock
from workers.metering import REFLECTION, TURN, BudgetSpent, charging
from workers.prompt import (
    QUOTED_TRUST,
    anchor_of,
    content_trust,
    operator_edit_note,
    undelivered_note,
)
from workers.reflection import reflect_on_failure
from workers.skills import turn_skills
from workers.taskruns import replies_to

log = logging.getLogger(__name__)

#: what the chat is told when its turn failed for good (the cause is in the logs and
#: the dead-letter list, never in the chat: it may name internals or a provider error)
FAILURE_NOTICE = "I could not answer this: the model failed; the operator has the details."


#: the error class recorded for a memory write that found no space (``status``,
#: ``/healthz``); attempts that failed of it do not count towards dead-lettering
DISK_FULL = "DiskFull"
#: what the chat is told, once per period, when a spending cap stopped its turn
BUDGET_NOTICE = ("The model budget {whose} is spent for this {period}; your messages are kept "
                 "and I will answer them when an admin raises the cap (/usage).")


def notice_reply_id(turn_id: str) -> str:
    """The failure notice's own reply id. Not the turn's: a dead letter retried later
    runs the same messages as the same turn id, and its answer must not be taken for
    the notice already sent (the outbox's sent marks, and platforms that dedupe a
    re-send by id: Matrix transactions, the local channel)."""
    return f"{turn_id}.notice"

@dataclass(frozen=True)
class Batch:
    """The messages of one turn, in arrival order."""

    group: str
    messages: list[Inbound]
    engaged_ids: list[str]
    raw: list[str]
    #: set for a batch re-read after an edit (the edit's event id): the same message
    #: with new words is another turn for extraction, never the original one
    revision: str = ""

    @property
    def turn_id(self) -> str:
        ids = [m.dedupe_id for m in self.messages]
        return turn_id_for(self.group, [*ids, f"revision:{self.revision}"] if self.revision
                           else ids)

    @property
    def anchor(self) -> Inbound:
        """The message a reply answers: the last engaged one (else the last one)."""
        return anchor_of(self.messages, self.engaged_ids)


def turn_id_for(group: str, dedupe_ids: Sequence[str]) -> str:
    """Stable id of the turn over exactly these messages."""
    digest = hashlib.sha256("\n".join([group, *dedupe_ids]).encode()).hexdigest()
    return f"turn-{digest[:32]}"


def parse_batch(group: str, raw: Sequence[bytes | str], revision: str = "") -> Batch:
    """Decode a ``processing`` list. Raises ``ValueError`` for a malformed entry."""
    try:
        entries = sorted((parse_entry(item) for item in raw), key=lambda e: e.seq)
    except ValueError as err:
        raise ValueError(f"{err} in {group}") from None
    messages = [Inbound.model_validate(e.msg) for e in entries]
    engaged = [m.message_id for m, e in zip(messages, entries, strict=True) if e.engaged]
    return Batch(group=group, messages=messages, engaged_ids=engaged,
                 raw=[e.raw for e in entries], revision=revision)


def closing(batch: Batch, text: str | None, reply_id: str
            ) -> tuple[events.OutboxEvent | None, events.OutboxEvent]:
    """What a turn publishes: the event of its reply ``text`` (None: no reply), which
    answers the batch's anchor in its chat and thread, and its ``done``, which names
    ``reply_id`` when there is a reply."""
    anchor = batch.anchor
    reply = None if text is None else events.reply(Outbound(
        channel=anchor.channel, account=anchor.account, chat_id=anchor.chat_id,
        thread_id=anchor.thread_id, text=text, reply_to_id=replies_to(anchor),
        reply_id=reply_id))
    return reply, events.done(anchor, [m.message_id for m in batch.messages],
                              reply_id if reply else None, batch.turn_id)


def episode_text(batch: Batch, reply: str | None) -> str:
    """The episode file's body: who said what, then the bot's answer."""
    lines = [f"Turn in {batch.group}.", ""]
    engaged = set(batch.engaged_ids)
    for m in batch.messages:
        mark = "" if m.message_id in engaged else " (context)"
        when = m.received_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        files = "".join(f" [file {a.stored}]" + (f" [{a.transcript}]" if a.transcript else "")
                        for a in m.attachments if a.stored)
        lines.append(f"- [{when}] {m.sender_name} ({m.sender_id}){mark}: {m.text}{files}")
    lines += ["", f"Bot: {reply}" if reply else "Bot: (no reply)"]
    return "\n".join(lines) + "\n"


def episode_trust(messages: Sequence[Inbound], admins: Collection[str] = (), *,
                  reply: str | None = None, read_trust: float = 1.0) -> float:
    """An episode is as trustworthy as the least trusted words it records: a forward or
    a quote in the batch lowers it to quoted trust, whoever posted it; and when it
    records a ``reply``, the memory the model read (``read_trust``), which a fooled
    model may repeat in its reply."""
    trust = min((content_trust(m, admins) for m in messages), default=0.0)
    return min(trust, read_trust) if reply else trust


class _TurnIdentities(Identities):
    """``Identities`` read once per user for one turn: the memory it opens and who pays
    ask for the same sender (one read less per turn); a ``/link`` made during the turn
    counts from the next."""

    def __init__(self, configured: Configured, client: redis.Redis, keys: Keys) -> None:
        super().__init__(configured, client, keys)
        self._seen: dict[str, str | None] = {}

    def person_of(self, user: str) -> str | None:
        if user not in self._seen:
            self._seen[user] = super().person_of(user)
        return self._seen[user]


class TurnRunner:
    """Runs turns for one group's batches inside a drain job."""

    def __init__(self, ctx: WorkerContext, gq: GroupQueue) -> None:
        self._ctx = ctx
        self._gq = gq
        self._settings = ctx.settings
        #: the turn id whose ``written`` flag the last ``run(mark_written=False)`` left
        self.unmarked_written: str | None = None
        #: the memory the last ``run`` opened: the group's, or a linked person's
        #: (``person:<id>``, for their DM: ``workers.identity``)
        self.opened: str | None = None
        #: the drain job's end (it was started just now): no tool call waits past it
        self.deadline = deadline_after(ctx.settings.worker.job_timeout)

    def _notes(self, gd: GroupDirectory, state: TurnRecord) -> tuple[str, ...]:
        """System notes for the prompt: the group's previous reply failed for good
        (recorded by the gateway's outbox, gateway/outgoing/_delivery.py; read by ``turn_begin``);
        the operator edited core memory by hand since the last turn
        (memory_store/files/_coreedits.py)."""
        note = undelivered_note(state.undelivered)
        if note is not None:
            log.info("turn in %s: previous reply was not delivered", self._gq.group)
        edits = [operator_edit_note(e) for e in notice_core_edits(gd)]
        return (*(() if note is None else (note,)), *edits)

    def dead_letter(self, batch: Batch, lock: GroupLock, why: str) -> None:
        """Move a batch that keeps failing aside and tell the chat, once per turn: a
        short notice as the turn's reply (when someone addressed the bot), then ``done``
        so waiting clients are released. Published like any reply (the ``published``
        flag makes it once), so it also ends the typing indicator a retry showed."""
        log.error("turn %s in %s failed too often (%s); moved to %s",
                  batch.turn_id, batch.group, why, self._gq.keys.dead(batch.group))
        self._gq.dead_letter(batch.raw, turn_id=batch.turn_id, why=why)
        self._gq.clear_retry()
        notice = FAILURE_NOTICE if batch.engaged_ids else None
        reply_event, done = closing(batch, notice, notice_reply_id(batch.turn_id))
        self._gq.turn_publish(batch.turn_id, lock.lock_key, lock.token, reply_event, done, notice)

    def _why_dead(self, batch: Batch, attempts: int) -> str:
        """The dead letter's reason: the last recorded error, or a crash when the
        attempts recorded none (the worker died: a signal, the OOM killer)."""
        cls, msg = self._gq.last_error(batch.turn_id)
        if cls:
            return f"{attempts} attempts; last error {cls}: {msg}"
        return f"{attempts} attempts; no error recorded: the worker died mid-turn (a crash)"

    def _storage_failed(self, batch: Batch, attempts: int, err: OSError) -> None:
        """A write to the group's memory failed (ENOSPC: the disk is full). Recorded as
        the turn's error with its cause, and the turn shown as retrying (``status``,
        ``/healthz``) from this first failure, so a stall is visible and a dead letter
        names the real reason; the caller re-raises (the job is retried)."""
        full = err.errno in (errno.ENOSPC, errno.EDQUOT)
        cls = DISK_FULL if full else type(err).__name__
        msg = (f"no space left on the data dir's disk ({err.strerror})" if full
               else str(err))[:300]
        log.error("turn %s in %s: writing memory failed (%s); it is retried", batch.turn_id,
                  batch.group, msg)
        with contextlib.suppress(redis.RedisError, OSError):  # Redis may refuse too
            self._gq.record_error(batch.turn_id, cls, msg)
            self._gq.note_retry(batch.turn_id, attempts)

    async def _reflect(self, memory: BaseMemory, batch: Batch, *, attempts: int,
                       error: BaseException | None = None, dead: bool = False) -> None:
        """A lesson about the turn's failure (``reflect_on_failure``), charged to the
        group as a reflection."""
        gq = self._gq
        with charging(gq.r, self._settings.usage, group=batch.group, person=None,
                      kind=REFLECTION, prefix=gq.keys.prefix):
            await reflect_on_failure(gq.r, memory, self._settings, group=batch.group,
                                     turn_id=batch.turn_id, error=error, dead=dead,
                                     message_ids=[m.message_id for m in batch.messages],
                                     attempts=attempts, prefix=gq.keys.prefix)

    def payer(self, batch: Batch) -> str:
        """Who pays for the turn besides the group: the sender of the message it answers
        (the last engaged one), as their linked identity when they have one."""
        user = batch.anchor.sender_key
        return self._identities.person_of(user) or user

    def park(self, batch: Batch, lock: GroupLock, spent: BudgetSpent) -> str:
        """A cap stopped the turn before a model request: keep the batch in the mailbox,
        park the group until a cap changes, tell the chat once per period."""
        counter = spent.counter
        whose = {"global": "of this assistant", "group": "of this chat"}.get(
            counter.scope.partition(":")[0], "for you")
        notice = BUDGET_NOTICE.format(whose=whose, period=counter.period)
        # one notice per period: a later period's notice for the same batch is another
        # reply (the outbox dedupes sends by reply id)
        event, done = closing(batch, notice if batch.engaged_ids else None,
                              f"{batch.turn_id}.budget.{counter.period_id}")
        lock.stop_renewal()  # the park script releases the lock itself
        told = Budget(self._gq.r, self._gq.keys).park(
            batch.group, token=lock.token, turn_id=batch.turn_id,
            period_id=f"{counter.scope}:{counter.period_id}", notice_event=event,
            done_event=done)
        if told == -1:
            raise LockLost(lock.lock_key)
        lock.held = False
        log.warning("turn %s in %s parked: %s%s", batch.turn_id, batch.group, spent,
                    "; chat told" if told else "")
        return "parked"

    async def run(self, batch: Batch, lock: GroupLock, max_attempts: int, *,
                  mark_written: bool = True) -> str:
        """Run (or finish a crashed run of) the turn over ``batch``.

        With ``mark_written=False`` the turn's ``written`` flag is left to the caller (the
        drain job sets it in its finish script, saving a round trip): the turn's id is
        then in ``unmarked_written`` (else ``None``). Until it is set, a retry writes the
        episode again, which ``memory_store`` dedupes by id.

        Returns "published", "replayed" (already published by an earlier attempt),
        "dead" (moved aside after ``max_attempts``) or "parked" (a spending cap stopped
        it: the batch is back in the mailbox, the lock and lease released). Raises
        ``LockLost`` if the lock was lost before publishing, ``PersonBusy`` if a linked
        person's lock stayed taken (nothing was begun), and whatever the agent raised
        (the job is retried).
        """
        self.unmarked_written = None
        self._identities = _TurnIdentities(self._settings.person_of, self._gq.r, self._gq.keys)
        # a linked person's DM opens their personal memory (workers/identity.py), which
        # their other DMs use too: the person's lock, after the group's, covers the turn
        self.opened = memory_key(self._identities, batch.group, batch.messages)
        person = person_lock(self._gq.r, self._gq.keys, self.opened,
                             ttl=lock.ttl_ms / 1000)
        if person is None:
            return await self._run(batch, self.opened, lock, max_attempts, mark_written, None)
        # the holder is another DM's turn (bounded by its job timeout) or a dead worker's
        # lock (gone within its TTL)
        if not person.acquire(timeout=self._settings.worker.job_timeout / 2):
            raise PersonBusy(person.lock_key)
        with person:
            # before anything is written there: the DM's redactions must find it
            self._gq.r.sadd(self._gq.keys.person_memories(batch.group), self.opened)
            return await self._run(batch, self.opened, lock, max_attempts, mark_written,
                                   person)

    async def _run(self, batch: Batch, opened: str, lock: GroupLock, max_attempts: int,
                   mark_written: bool, person: GroupLock | None) -> str:
        """``run`` on the memory ``opened``, with ``person``'s lock held when it is a
        linked person's: the episode is written only while both locks are ours."""
        gq = self._gq
        anchor = batch.anchor
        ids = [m.message_id for m in batch.messages]
        state = gq.turn_begin(batch.turn_id,
                              events.typing(anchor) if batch.engaged_ids else None,
                              max_attempts)
        try:
            gd, memory = self._ctx.group_memory(opened)
        except OSError as err:  # a new chat's directory on a full disk
            self._storage_failed(batch, state.attempts, err)
            raise
        outcome = "replayed"
        if state.published:
            reply_text = state.reply
            # What the earlier attempt's model read is not kept: count it as quoted.
            read_trust = QUOTED_TRUST
        else:
            # A turn whose last attempt found the disk full was not at fault: once
            # space is back (its memory opened above) it runs, in its place in the
            # chat's order, instead of being dead-lettered for the attempts it lost.
            if state.attempts > max_attempts and \
                    gq.last_error(batch.turn_id)[0] != DISK_FULL:
                self.dead_letter(batch, lock, self._why_dead(batch, state.attempts - 1))
                await self._reflect(memory, batch, dead=True, attempts=state.attempts - 1)
                return "dead"
            if state.attempts >= 2:  # an earlier attempt failed or its worker died
                gq.note_retry(batch.turn_id, state.attempts)
            agent = build_agent(self._settings)
            payer = self.payer(batch)
            link = host_link(gq.r, self._settings, batch.group, lock.token, self.deadline)
            approved = run_approved(gq.r, gq.keys, group=batch.group, turn_id=batch.turn_id,
                                    messages=batch.messages, link=link)
            try:
                with charging(gq.r, self._settings.usage, group=batch.group, person=payer,
                              kind=TURN, prefix=gq.keys.prefix):
                    reply = await agent.run(TurnRequest(
                    group=batch.group, turn_id=batch.turn_id, messages=batch.messages,
                        core=gd.core_memory(), memory=memory, now=datetime.now(UTC),
                        engaged_ids=batch.engaged_ids, notes=self._notes(gd, state),
                        shared=shared_profiles(self._identities, self._settings.data_dir,
                                               batch.messages),
                        host=link, approved=approved,
                        skills=turn_skills(self._settings.data_dir, batch.group),
                        images=(media.images(self._settings.data_dir, batch.group,
                                             batch.messages)
                                if self._settings.model.takes_images else ()),
                    ))
            except BudgetSpent as spent:
                return self.park(batch, lock, spent)
            except TurnError as err:
                await self._reflect(memory, batch, error=err, attempts=state.attempts)
                raise
            lock.check()
            reply_text = reply.text if reply.text and reply.text.strip() else None
            if link is not None and link.pending:  # calls waiting for /approve, named
                reply_text = "\n\n".join([*([reply_text] if reply_text else []), *link.pending])
            read_trust = reply.read_trust
            reply_event, done = closing(batch, reply_text, batch.turn_id)
            published = gq.turn_publish(batch.turn_id, lock.lock_key, lock.token, reply_event,
                                        done, reply_text)
            if published == -1:
                raise LockLost(lock.lock_key)
            outcome = "published" if published == 1 else "replayed"
        if not state.written:
            lock.check()
            if person is not None:
                person.check()
            try:
                await memory.write(episode_text(batch, reply_text), kind="episode", metadata={
                    "id": batch.turn_id,
                    "source": f"{batch.group}:msg/" + ",".join(ids),
                    "message_ids": ids,
                    "participants": sorted({f"{m.sender_name} ({m.sender_key})"
                                            for m in batch.messages}),
                    "trust": episode_trust(batch.messages, self._settings.admins,
                                           reply=reply_text, read_trust=read_trust),
                    "created": datetime.now(UTC).isoformat(),
                    # what each message quoted (its text was shown to the model): a
                    # redaction of the quoted message follows these
                    # (memory_store/maintenance/_quotes.py)
                    **({"quotes": quotes} if (quotes := {m.message_id: m.reply_to_id
                                                         for m in batch.messages
                                                         if m.reply_to_id
                                                         and m.reply_to_text})
                       else {}),
                })
            except OSError as err:  # the reply is out; only the episode waits for space
                self._storage_failed(batch, state.attempts, err)
                raise
            if mark_written:
                gq.mark_written(batch.turn_id)
            else:
                self.unmarked_written = batch.turn_id
        if state.attempts >= 2:  # also after a replay: the attempt that published died
            gq.clear_retry()
        return outcome

"""The drain job: works through one group's mailbox, one turn at a time.

Enqueued by the gateway (``gateway.queue.enqueue_drain``) when a group's mailbox gets its
first message and no drain job exists. The job takes the group's lock, moves everything
waiting (context + mailbox) into ``processing`` in one step, runs the turn, clears
``processing`` and loops while the mailbox is not empty; messages arriving during a turn
are the next turn's batch, all of them. A batch left in ``processing`` by a killed
worker is retried as the same turn. After ``max_turns`` turns the job hands the group to
a fresh job so one busy group cannot hold a worker forever. Each written turn is queued
for fact extraction (``workers.extraction``) in the finish script, after its reply. The
state machine and the scripts that move it are drawn in ``gateway/queue/__init__.py``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from pydantic import ValidationError

from gateway.queue import (
    LOCK_BUSY,
    LOCK_LOST,
    DrainOptions,
    GroupQueue,
    Keys,
    enqueue_drain,
    job_queue,
)
from memory_store import is_person_key
from workers.context import WorkerContext, current
from workers.extraction import extraction_entry, schedule_extraction
from workers.lock import GroupLock, LockLost, PersonBusy
from workers.maintenance import after_episodes
from workers.taskruns import note_runs
from workers.turn import TurnRunner, parse_batch

log = logging.getLogger(__name__)

#: longest a drain job waits for a group lock someone else holds, seconds
LOCK_WAIT_MAX = 5.0


def drain_group(
    group: str,
    *,
    redis_url: str | None = None,
    ctx: WorkerContext | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Drain ``group``'s mailbox. ``options`` are ``gateway.queue.DrainOptions`` (the job's
    kwargs, as ``enqueue_drain`` wrote them; its defaults otherwise). Returns a JSON
    summary (turns run, how it ended)."""
    ctx = ctx or current(redis_url)
    opts = DrainOptions(**options)
    lease_ttl, lock_ttl, max_attempts = opts.lease_ttl, opts.lock_ttl, opts.max_attempts
    queue, prefix = opts.queue, opts.prefix
    keys = Keys(prefix)
    gq = GroupQueue(ctx.redis, keys, group)
    lock = GroupLock(ctx.redis, keys.lock(group), keys.lease(group), ttl=lock_ttl,
                     lease_ttl=lease_ttl)
    first: list[str] | int | None = gq.take(lock.token, lock.ttl_ms, lock.lease_ttl_ms,
                                            acquire=True)
    if first == LOCK_BUSY:
        first = None
        # Waiting covers a predecessor that is just handing over or finishing, and (with
        # short TTLs) a killed holder's lock expiring. A live holder keeps renewing: then
        # this is a duplicate, and it must not keep a worker idle for long.
        if not lock.acquire(timeout=min(lock_ttl * 1.5 + 1, LOCK_WAIT_MAX)):
            log.info("drain %s: lock busy, another job owns the group", group)
            return {"group": group, "turns": 0, "end": "locked"}
    else:
        lock.adopt()
    runner = TurnRunner(ctx, gq)
    turns = 0
    end = "drained"
    try:
        with lock:
            while True:
                lock.check()
                written: str | None = None
                extract: str | None = None
                if first is not None:
                    raw, first = first, None
                else:
                    raw = gq.take(lock.token, lock.ttl_ms, lock.lease_ttl_ms, acquire=False)
                if raw == LOCK_LOST:
                    raise LockLost(lock.lock_key)
                if isinstance(raw, list) and raw:
                    try:
                        batch = parse_batch(group, raw)
                    except (ValueError, ValidationError) as err:
                        # cannot happen with entries the inbox wrote; never retry it forever
                        log.error("drain %s: unreadable batch moved to %s: %s", group,
                                  keys.dead(group), err)
                        gq.dead_letter(raw, why=f"unreadable batch: {err}")
                    else:
                        outcome = ctx.run(runner.run(batch, lock, max_attempts,
                                                     mark_written=False))
                        note_runs(ctx.redis, keys, ctx.settings, group,
                                  [m.sender_id for m in batch.messages], outcome)
                        if outcome == "parked":  # a spending cap: the batch is kept
                            end = "parked"
                            break
                        written = runner.unmarked_written
                        if written is not None:
                            extract = extraction_entry(ctx.settings, batch)
                        turns += 1
                        log.info("drain %s: turn %d %s", group, turns, outcome)
                lock.stop_renewal()  # the finish script may release the lock itself
                more, episodes = gq.finish(lock.token, written, extract)
                if more == LOCK_LOST:
                    raise LockLost(lock.lock_key)
                if extract is not None:  # after publishing: never on the reply's path
                    schedule_extraction(ctx.redis, group, ctx.settings, queue=queue,
                                        prefix=prefix, lock_ttl=lock_ttl)
                memory = runner.opened or group
                if written:
                    if is_person_key(memory):
                        # the episode went to a linked person's memory, shared by their
                        # DMs: count it there, and consolidate that (under its lock)
                        episodes = int(ctx.redis.incr(keys.episodes(memory)))  # type: ignore[arg-type]
                    after_episodes(ctx.redis, memory, ctx.settings, episodes, queue=queue,
                                   prefix=prefix, lock_ttl=lock_ttl)
                if more == 0:
                    lock.held = False
                    break
                lock.start_renewal()
                if turns >= opts.max_turns:
                    # Hand over while still holding the lease, so no one else enqueues; the
                    # lease now stands for the successor (the sweeper keeps it while queued).
                    successor = uuid.uuid4().hex
                    gq.hand_over(successor, lock.lease_ttl_ms)
                    enqueue_drain(job_queue(ctx.redis, queue), group, opts, successor)
                    end = "handed-off"
                    break
    except LockLost:
        log.error("drain %s: lock lost mid-job; leaving the group to its new owner", group)
        end = "lock-lost"
    except PersonBusy as busy:
        # The batch stays in processing and the lease, no longer renewed, lapses: the
        # sweeper hands the group to a new job, which retries the same turn.
        log.warning("drain %s: %s stayed taken; the turn waits for a new job", group, busy)
        end = "person-busy"
    return {"group": group, "turns": turns, "end": end}

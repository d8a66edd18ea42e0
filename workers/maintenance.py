"""Memory maintenance: consolidating a group's memory now and then, never during a turn.

Policy. The drain job's finish script (``gateway/queue/lua/finish.lua``) counts each
written episode in the group's counter, atomically with marking it written; when
``consolidation_due`` (at least
``[memory] consolidate_every`` episodes since the last consolidation; 0 turns it off)
and no consolidation is pending for the group (a Redis key taken with SET NX and a TTL,
so a lost job cannot block the group for longer than ``PENDING_TTL``), ``after_episodes``
enqueues ``consolidate_group`` on the background queue (``gateway.queue.background_queue``:
turn workers take it when no turn waits).

The job (``consolidate_group``) runs on the skeleton of ``workers/groupjob.py``: under
the group lock, never during a turn, rescheduled ``RESCHEDULE_DELAY`` seconds later while
the group is busy. A message arriving during a consolidation waits for it (the drain
job waits up to 5 s for the lock, then the sweeper re-enqueues it).
Consolidation is idempotent (``memory_store.maintenance._consolidate``), so a duplicate job is
harmless, only wasted work.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from gateway.config import Settings
from gateway.queue import (
    CONSOLIDATE_JOB,
    DEFAULT_QUEUE,
    Keys,
)
from memory_store.maintenance import consolidate
from workers.groupjob import GiveUp, GroupJob, JobSpec, enqueue_once

log = logging.getLogger(__name__)

#: longest a consolidation stays "pending" (queued, rescheduled or running) without
#: finishing before another may be enqueued, seconds
PENDING_TTL = 3600
#: delay before a job that found the group busy tries again, seconds
RESCHEDULE_DELAY = 15
#: a group busy this many times in a row is left for the next due consolidation
MAX_RESCHEDULES = 40
DEFAULT_RETRIES = 2
CONSOLIDATION = JobSpec(CONSOLIDATE_JOB, "consolidation", Keys.consolidating, PENDING_TTL,
                        GiveUp(RESCHEDULE_DELAY, MAX_RESCHEDULES))


def consolidation_due(episodes_since_last: int, every: int) -> bool:
    """Whether a group with ``episodes_since_last`` new episodes needs consolidating
    under ``[memory] consolidate_every = every`` (0 or less: never)."""
    return every > 0 and episodes_since_last >= every


def schedule_consolidation(
    client: redis.Redis,
    group: str,
    *,
    every: int,
    queue: str = DEFAULT_QUEUE,
    prefix: str = "pnc:",
    lock_ttl: float = 30.0,
    job_timeout: int = 300,
    count: int | None = None,
) -> str | None:
    """Enqueue a consolidation of ``group`` if one is due (``count`` episodes since the
    last one; read from Redis when not given) and none is pending; returns the job id,
    or None."""
    if count is None:
        raw = client.get(Keys(prefix).episodes(group))
        count = int(raw) if raw is not None else 0  # type: ignore[arg-type]
    if not consolidation_due(count, every):
        return None
    job_id = enqueue_once(client, CONSOLIDATION, group, queue=queue, prefix=prefix,
                          lock_ttl=lock_ttl, timeout=job_timeout, retries=DEFAULT_RETRIES)
    if job_id is not None:
        log.info("consolidation of %s enqueued after %d episodes (%s)", group, count, job_id)
    return job_id


def after_episodes(
    client: redis.Redis,
    group: str,
    settings: Settings,
    count: int,
    *,
    queue: str,
    prefix: str,
    lock_ttl: float,
) -> str | None:
    """Schedule a consolidation of ``group`` if ``count`` episodes since the last one make
    it due (the drain job's finish script counts them). Returns the job id, or None.
    Never raises: a scheduling problem must not stop the group's turns."""
    every = settings.memory.consolidate_every
    if every <= 0:
        return None
    try:
        return schedule_consolidation(
            client, group, every=every, queue=queue, prefix=prefix, lock_ttl=lock_ttl,
            job_timeout=settings.worker.job_timeout, count=count)
    except Exception as exc:
        log.warning("could not schedule consolidation of %s: %r", group, exc)
        return None


def consolidate_group(group: str, **job: Any) -> dict[str, Any]:
    """Consolidate ``group``'s memory under the group lock. ``job`` are the keyword
    arguments of ``workers.groupjob.GroupJob`` (queue, prefix, lock_ttl, job_timeout,
    retries, reschedules; redis_url or ctx). Returns a JSON summary: ``end`` is
    "consolidated" (with ``changed``, the records changed), "rescheduled" (with the new
    ``job``) or "gave-up" (busy ``MAX_RESCHEDULES`` times in a row)."""
    run = GroupJob(CONSOLIDATION, group, **job)

    def body() -> dict[str, Any]:
        client, keys = run.client, run.keys
        raw = client.get(keys.episodes(group))
        seen = int(raw) if raw is not None else 0  # type: ignore[arg-type]
        _, memory = run.ctx.group_memory(group)
        changed = consolidate(memory)  # sync: a job needs no event loop for it
        # what was counted before, not zero: should the lock have lapsed meanwhile, the
        # episodes a turn wrote since still count toward the next consolidation
        client.decrby(keys.episodes(group), seen)
        log.info("consolidated %s: %d records changed", group, changed)
        return run.summary("consolidated", changed=changed)

    return run.run(body)

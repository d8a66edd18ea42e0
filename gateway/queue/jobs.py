"""Enqueueing RQ jobs: one set of options for every job the pipeline queues.

Jobs are named by import path (``workers.drain.drain_group``): the gateway never imports
``workers``. Every job gets the JSON serializer, an explicit timeout, a ``Retry`` (when
``retries`` > 0) and the same result/failure TTLs. RQ is used through its public API
only (``Queue.enqueue_call``, ``Queue.enqueue_in``, ``Retry``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import redis
from rq import Queue, Retry

#: import path of the drain job, as RQ resolves it inside a worker
DRAIN_JOB = "workers.drain.drain_group"
#: import path of the consolidation job
CONSOLIDATE_JOB = "workers.maintenance.consolidate_group"
#: import path of the fact-extraction job
EXTRACT_JOB = "workers.extraction.extract_group"
#: import path of the redaction job (deleted messages, ``/forget``)
REDACT_JOB = "workers.redaction.redact_group"
#: the RQ queue jobs go to unless ``[queue] name`` says otherwise
DEFAULT_QUEUE = "pnc-drain"
#: a group's background jobs go to the drain queue's name plus this: a worker listens
#: to the drain queue first (RQ dequeues in the order of its queues), so an idle worker
#: always takes a waiting turn before a background job, and a background-only worker
#: (``[queue] background_workers``) keeps model calls for facts off the turn workers
BACKGROUND_SUFFIX = ".background"
#: seconds between RQ's retries of a failed job (its scheduler runs them)
RETRY_INTERVALS = [1, 5, 30]
#: how long RQ keeps a finished job's result, and a failed job, seconds
RESULT_TTL = 60
FAILURE_TTL = 7 * 24 * 3600


@dataclass(frozen=True)
class DrainOptions:
    """What a drain job needs to know of ``[queue]``/``[worker]``; travels as its kwargs."""

    lease_ttl: float = 30.0
    lock_ttl: float = 30.0
    max_turns: int = 20
    max_attempts: int = 5
    queue: str = DEFAULT_QUEUE
    job_timeout: int = 300
    retries: int = 3
    prefix: str = "pnc:"


def background_queue(name: str = DEFAULT_QUEUE) -> str:
    """The name of the queue a group's background jobs go to, for drain queue ``name``."""
    return name if name.endswith(BACKGROUND_SUFFIX) else name + BACKGROUND_SUFFIX


def worker_queues(name: str = DEFAULT_QUEUE) -> list[str]:
    """What a turn worker listens to, in priority order: turns, then background jobs."""
    return [name, background_queue(name)]


def job_queue(connection: redis.Redis, name: str = DEFAULT_QUEUE) -> Queue:
    """The RQ queue ``name`` with the JSON serializer every job uses."""
    return Queue(name, connection=connection, serializer="json")


def enqueue_job(
    queue: Queue,
    func: str,
    kwargs: dict[str, Any],
    *,
    timeout: int,
    retries: int,
    description: str,
    job_id: str | None = None,
    delay: timedelta | None = None,
) -> str:
    """Enqueue ``func`` (an import path) with the one set of options; after ``delay``
    (RQ's scheduler) when given. Returns the job id."""
    options: dict[str, Any] = {
        "job_id": job_id,
        "kwargs": kwargs,
        "timeout": timeout,
        "retry": Retry(max=retries, interval=RETRY_INTERVALS) if retries > 0 else None,
        "result_ttl": RESULT_TTL,
        "failure_ttl": FAILURE_TTL,
        "description": description,
    }
    if delay is not None:
        options["job_timeout"] = options.pop("timeout")
        return str(queue.enqueue_in(delay, func, **options).id)
    # RQ registers the queue and saves and pushes the job in two transactions of its
    # own; on one pipeline of ours they are one (MULTI ... EXEC: two commands fewer)
    with queue.connection.pipeline() as pipe:
        job_id = str(queue.enqueue_call(func, pipeline=pipe, **options).id)
        pipe.execute()
    return job_id


def enqueue_drain(queue: Queue, group: str, options: DrainOptions, job_id: str | None = None
                  ) -> str:
    """Enqueue the drain job of ``group`` (its id is the one the lease holds)."""
    return enqueue_job(queue, DRAIN_JOB, {"group": group, **asdict(options)},
                       timeout=options.job_timeout, retries=options.retries,
                       description=f"drain {group}", job_id=job_id)


#: what each background job of a group does, for its RQ description
_VERBS = {CONSOLIDATE_JOB: "consolidate", EXTRACT_JOB: "extract", REDACT_JOB: "redact"}


def enqueue_group_job(queue: Queue, job: str, group: str, kwargs: dict[str, Any], *,
                      timeout: int, retries: int, job_id: str | None = None,
                      delay: timedelta | None = None) -> str:
    """Enqueue (or, with ``delay``, schedule) one of a group's background jobs:
    ``CONSOLIDATE_JOB``, ``EXTRACT_JOB`` or ``REDACT_JOB``, on the background queue of
    drain queue ``queue``. Each takes the group lock and yields to the group's turns
    itself; one job serves everything waiting for it, so a duplicate is harmless."""
    if job not in _VERBS:
        raise ValueError(f"not a group background job: {job!r}")
    queue = job_queue(queue.connection, background_queue(queue.name))
    return enqueue_job(queue, job, {"group": group, **kwargs}, timeout=timeout,
                       retries=retries, description=f"{_VERBS[job]} {group}", job_id=job_id,
                       delay=delay)

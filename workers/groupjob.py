"""The skeleton of a group's background job: consolidation, fact extraction, redaction.

Each such job runs on the background queue and takes the SAME group lock as the drain
job, so it never overlaps a turn of its group. Its own key (``JobSpec.lease``:
``consolidate:{g}``, ``extracting:{g}``, ``redact:{g}``) stands in for the drain lease
the lock renews: renewing the real lease would make the inbox believe a drain job
exists and skip enqueueing one. It yields to the group's turns: with a drain queued or
running, messages waiting (or held for their files), a batch in processing, or the
lock busy, it does not wait but schedules itself ``GiveUp.delay`` seconds later (RQ's
scheduler, which the workers run) and returns. What differs from job to job is a
``JobSpec``: its import path, its lease key and the give-up policy (``GiveUp``) for a
group that stays busy.

States of one run (``GroupJob.run``)::

    busy? ──yes──▶ reschedule (or give up: the lease key is dropped)
      │ no
    lock:{g} SET NX (+ its lease key) ──busy──▶ reschedule
      │ taken
    body ──Busy──▶ release, reschedule
      │ ok                     │ error: release; the lease key stays (RQ's Retry runs
    release, DEL lease key     │ the job again) unless ``keep_on_error`` is off

RQ names a job by its import path: the jobs keep theirs (``gateway.queue.jobs``:
``workers.maintenance.consolidate_group``, ``workers.extraction.extract_group``,
``workers.redaction.redact_group``), each a function over this skeleton with the same
keyword arguments, so a job queued, scheduled or dead-lettered before an upgrade still
runs after it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis

from gateway.queue import DEFAULT_QUEUE, Keys, enqueue_group_job, job_queue
from workers.context import WorkerContext, current
from workers.lock import GroupLock, person_lock

log = logging.getLogger(__name__)

#: how long a job waits for the group lock before rescheduling itself, seconds
LOCK_WAIT = 0.5


class Busy(Exception):
    """Raised by a job's body when the group got busy under it (a linked person's lock
    stayed taken): the run releases the lock and reschedules the job."""


@dataclass(frozen=True)
class GiveUp:
    """The give-up policy: a busy group is tried again after ``delay`` seconds; after
    ``after`` reschedules in a row the job gives up (``slow`` None: left for the next
    time it is scheduled) or is tried every ``slow`` seconds from then on."""

    delay: int
    after: int
    slow: int | None = None


@dataclass(frozen=True)
class JobSpec:
    """What one kind of background job is."""

    #: its import path, as RQ resolves it (``gateway.queue.jobs``)
    path: str
    #: its name in the logs ("consolidation")
    name: str
    #: the key its lock renews as its lease (``Keys.consolidating``...)
    lease: Callable[[Keys, str], str]
    lease_ttl: int
    policy: GiveUp
    #: a rescheduled job's id is stored in the lease key (its scheduler takes the key
    #: with SET NX, so no second job is queued meanwhile)
    track: bool = True
    #: the lease key outlives a failed run (RQ's Retry runs the job again)
    keep_on_error: bool = True


def enqueue_once(client: redis.Redis, spec: JobSpec, group: str, *, queue: str, prefix: str,
                 lock_ttl: float, timeout: int, retries: int) -> str | None:
    """Enqueue ``spec``'s job for ``group`` unless its lease key says one is pending (SET
    NX for ``spec.lease_ttl``); returns the job id, or None. An enqueue that fails drops
    the key again, so the next turn may try."""
    key = spec.lease(Keys(prefix), group)
    job_id = uuid.uuid4().hex
    if not client.set(key, job_id, nx=True, ex=spec.lease_ttl):
        return None
    kwargs = {"queue": queue, "prefix": prefix, "lock_ttl": lock_ttl, "job_timeout": timeout,
              "retries": retries}
    try:
        enqueue_group_job(job_queue(client, queue), spec.path, group, kwargs,
                          timeout=timeout, retries=retries, job_id=job_id)
    except BaseException:
        client.delete(key)
        raise
    return job_id


class GroupJob:
    """One run of a background job of ``group``; its keyword arguments are the job's
    (as ``enqueue_group_job`` wrote them)."""

    def __init__(self, spec: JobSpec, group: str, *, queue: str = DEFAULT_QUEUE,
                 prefix: str = "pnc:", lock_ttl: float = 30.0, job_timeout: int = 300,
                 retries: int = 2, reschedules: int = 0, redis_url: str | None = None,
                 ctx: WorkerContext | None = None) -> None:
        self.spec = spec
        self.group = group
        self.ctx = ctx or current(redis_url)
        self.client = self.ctx.redis
        self.keys = Keys(prefix)
        self.reschedules = reschedules
        #: what the job's next run gets (with ``reschedules``)
        self.kwargs: dict[str, Any] = {"queue": queue, "prefix": prefix, "lock_ttl": lock_ttl,
                                       "job_timeout": job_timeout, "retries": retries}
        self.lease = spec.lease(self.keys, group)
        self.lock = GroupLock(self.client, self.keys.lock(group), self.lease, ttl=lock_ttl,
                              lease_ttl=spec.lease_ttl)

    def busy(self) -> bool:
        """Whether the group has a drain queued or running (its lease), messages waiting
        (in its mailbox, or held while their files download), or a batch in processing:
        the job yields then, since taking the group lock would only make that turn wait
        for it (and a redaction would miss the words of a message still held)."""
        keys, group = self.keys, self.group
        return bool(int(self.client.exists(  # type: ignore[arg-type]
            keys.lease(group), keys.mailbox(group), keys.processing(group),
            keys.media_hold(group))))

    @contextlib.contextmanager
    def person(self, memory: str) -> Iterator[None]:
        """Hold the lock of ``memory`` when it is a linked person's directory (taken after
        the group's, as a turn takes them; ``workers/lock.py``). Raises ``Busy`` when it
        stays taken: what the job did so far is kept, a turn comes first."""
        lock = person_lock(self.client, self.keys, memory, ttl=self.kwargs["lock_ttl"])
        if lock is None:
            yield
            return
        if not lock.acquire(timeout=LOCK_WAIT):
            raise Busy(lock.lock_key)
        with lock:
            yield

    def summary(self, end: str, **extra: Any) -> dict[str, Any]:
        return {"group": self.group, "end": end, **extra}

    def reschedule(self) -> dict[str, Any]:
        """Schedule this job again later, or give up, as the spec's policy says."""
        n, policy, name = self.reschedules, self.spec.policy, self.spec.name
        delay = policy.delay
        if n >= policy.after:
            if policy.slow is None:
                log.warning("%s of %s: group busy %d times; left for later", name,
                            self.group, n)
                self.client.delete(self.lease)
                return self.summary("gave-up", reschedules=n)
            if n == policy.after:
                log.warning("%s of %s: group busy %d times in a row; trying every %ds",
                            name, self.group, n, policy.slow)
            delay = policy.slow
        kw = self.kwargs
        job_id = enqueue_group_job(
            job_queue(self.client, kw["queue"]), self.spec.path, self.group,
            {**kw, "reschedules": n + 1}, timeout=kw["job_timeout"], retries=kw["retries"],
            delay=timedelta(seconds=delay))
        if self.spec.track:
            self.client.set(self.lease, job_id, ex=self.spec.lease_ttl)
        log.info("%s of %s: group busy, rescheduled in %ds (%s)", name, self.group, delay,
                 job_id)
        return self.summary("rescheduled", job=job_id)

    def run(self, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``body()`` under the group lock, unless the group is busy (then rescheduled);
        its summary, or the reschedule's."""
        if self.busy() or not self.lock.acquire(timeout=LOCK_WAIT):
            return self.reschedule()
        try:
            out = body()
        except Busy:
            self.lock.release()
            return self.reschedule()
        except BaseException:
            self.lock.release()
            if not self.spec.keep_on_error:
                self.client.delete(self.lease)
            raise
        # stop renewing (which would recreate the lease key) before dropping it
        self.lock.release()
        self.client.delete(self.lease)
        return out

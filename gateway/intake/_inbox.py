"""The inbox: the sink every adapter pushes to.

``await inbox(msg)`` routes the message, dedupes it by ``Inbound.dedupe_id``, pushes it
to its group's mailbox (engaged) or context list (not engaged), and makes sure exactly
one drain job exists for the group, all in one Lua script so a push can never slip
between a finishing job's "mailbox empty?" check and its lease release. It returns only
once Redis accepted the message and raises (``redis.RedisError``) when it could not, so
the adapter does not ack the platform. Below the hard disk watermark (``[disk]
stop_free_mb``, gateway/operations/_pressure.py) it refuses every message the same way
(``InboxRefused``): webhooks answer 503 and pollers keep their cursors, so the
platforms deliver them again once space is back, instead of a turn failing half-way.

Exactly one drain job per group: the script takes the group's lease ``drain:{group}``
(SET NX with a TTL) and only the caller that took it enqueues the RQ job. The running
job renews the lease; the ``Sweeper`` re-enqueues a drain for any active group whose
lease expired (a worker killed with -9, or a gateway that died between the script and
the enqueue).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import redis
import redis.asyncio as aioredis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from channels.models import Inbound
from gateway import wait_any
from gateway.config import Settings
from gateway.intake._approvals import ApprovalDesk
from gateway.intake._changes import apply_change
from gateway.intake._frontdesk import FrontDesk
from gateway.intake._memorydesk import MemoryDesk
from gateway.intake._router import Disposition, Router
from gateway.operations._pressure import DiskGuard
from gateway.queue import (
    BEHIND_HOLD,
    DUPLICATE,
    KEPT_ENQUEUE,
    DrainOptions,
    GatewayQueue,
    Keys,
    encode_entry,
    enqueue_drain,
    job_queue,
)
from gateway.queue.media import HELD_DUPLICATE, MediaHold

log = logging.getLogger(__name__)


class InboxRefused(redis.RedisError):
    """The inbox takes no new message now (the disk is below its hard watermark). A
    ``redis.RedisError`` because it means the same to an adapter: not made durable, do
    not ack, let the platform retry."""


def drain_options(config: Settings, keys: Keys) -> DrainOptions:
    """``[queue]`` and ``[worker] job_timeout`` as a drain job's options."""
    q = config.queue
    return DrainOptions(lease_ttl=q.lease_ttl, lock_ttl=q.lock_ttl,
                        max_turns=q.max_turns_per_job, max_attempts=q.max_attempts,
                        queue=q.name, job_timeout=config.worker.job_timeout, retries=q.retries,
                        prefix=keys.prefix)


class DrainEnqueuer:
    """Enqueues drain jobs (``gateway.queue.enqueue_drain``) on the configured queue."""

    def __init__(self, config: Settings, sync_redis: redis.Redis, keys: Keys) -> None:
        self.options = drain_options(config, keys)
        self.queue: Queue = job_queue(sync_redis, config.queue.name)

    def enqueue(self, group: str, job_id: str | None = None) -> str:
        """Enqueue the drain job for ``group``."""
        return enqueue_drain(self.queue, group, self.options, job_id)

    async def aenqueue(self, group: str, job_id: str | None = None) -> str:
        """``enqueue`` from the event loop (RQ is synchronous: it runs in a thread)."""
        return await asyncio.to_thread(self.enqueue, group, job_id)

    def waiting(self, job_id: str) -> bool:
        """True if the job exists and has not started (queued, scheduled for a retry,
        deferred): its lease must not expire just because the queue is long."""
        try:
            job = Job.fetch(job_id, connection=self.queue.connection, serializer="json")
        except NoSuchJobError:
            return False
        status = job.get_status(refresh=False)
        if status == JobStatus.QUEUED:
            # A worker killed between popping the job and marking it started leaves it
            # "queued" in no queue: that job will never run, so its lease must lapse.
            return self.queue.get_job_position(job_id) is not None
        return status in (JobStatus.SCHEDULED, JobStatus.DEFERRED)


class Inbox:
    """The ``InboundSink`` the gateway hands to every channel."""

    def __init__(
        self,
        config: Settings,
        redis_client: aioredis.Redis,
        enqueuer: DrainEnqueuer,
        keys: Keys | None = None,
    ) -> None:
        self._cfg = config
        self._q = GatewayQueue(redis_client, keys or Keys())
        self._enqueuer = enqueuer
        self.memory = MemoryDesk(config, enqueuer.queue, self._q.keys)
        sync = enqueuer.queue.connection
        self.front = FrontDesk(config, redis_client, sync, self._q.keys, Router(config),
                               memory=self.memory,
                               approvals=ApprovalDesk(config, sync, self._q, enqueuer))
        self.counts: dict[str, int] = {"engage": 0, "context": 0, "drop": 0, "duplicate": 0,
                                       "command": 0, "pairing": 0}
        self.disk = DiskGuard(config.data_dir, config.disk)
        self.hold = MediaHold(redis_client, self._q.keys)
        #: set when a message is held for its files (``gateway.media.downloads`` waits on it)
        self.media_wake = asyncio.Event()

    async def __call__(self, msg: Inbound) -> str:
        return await self.accept(msg)

    async def accept(self, msg: Inbound) -> str:
        """Route, dedupe and store ``msg``; returns what happened: engage, context, drop,
        duplicate, or command / pairing (answered by the front desk, never seen by the
        model), or for an edit/deletion edited / deleted / recorded (gateway/intake/_changes.py).
        Raises ``redis.RedisError`` when it could not be made durable (``InboxRefused``
        below the hard disk watermark)."""
        if self.disk.refuse():
            raise InboxRefused(f"less than [disk] stop_free_mb = "
                               f"{self._cfg.disk.stop_free_mb:g} MB free on the data dir")
        route = await self.front.triage(msg)  # pairing gate, chat commands
        if isinstance(route, str):
            self.counts[route] += 1
            return route
        if route.disposition is Disposition.CHANGE:
            # an edit/deletion: never a turn of its own (gateway/intake/_changes.py)
            if msg.kind == "deletion" and msg.original_id:  # maybe held for its files
                await self.hold.note_deleted(route.group, msg.account, msg.original_id,
                                             self._cfg.queue.dedupe_ttl)
            outcome = await apply_change(self._q, msg, route.group,
                                         dedupe_ttl=self._cfg.queue.dedupe_ttl)
            if outcome == "recorded":  # memory may hold the message: apply it there
                await self._redact(route.group)
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            return outcome
        if route.disposition is Disposition.DROP:
            log.info("dropped message from %s in %s: %s", msg.sender_id, route.group, route.reason)
            self.counts["drop"] += 1
            return "drop"
        return await self._push(route.group, msg, route.disposition)

    async def accept_operator(self, msg: Inbound) -> str:
        """Store a message from the operator's side (a file dropped into a group's
        ``inbox/``: gateway/intake/_filedrop.py): no chat policy, pairing or command applies, and
        it always engages. Deduped like any message: engage or duplicate."""
        if self.disk.refuse():
            raise InboxRefused(f"less than [disk] stop_free_mb = "
                               f"{self._cfg.disk.stop_free_mb:g} MB free on the data dir")
        return await self._push(msg.group, msg, Disposition.ENGAGE)

    async def _push(self, group: str, msg: Inbound, disposition: Disposition) -> str:
        # A message with files waits for their download in the group's hold (the media
        # job lets it on once they are stored), and so does any message behind it, so
        # the turn sees the files and the group's order holds (gateway/queue/media.py).
        # One without files is pushed by one script that first checks the hold.
        if not (msg.attachments and self._cfg.media.enabled):
            pushed = await self._enter(group, msg, disposition, msg.dedupe_id,
                                       behind_hold=True)
            if pushed is not None:
                return pushed
        held = await self.hold.hold(  # has files, or the group holds some: held
            group, self._q.keys.dedupe(msg.dedupe_id), msg.model_dump_json(),
            disposition.value, has_files=True, dedupe_ttl=self._cfg.queue.dedupe_ttl)
        if held == HELD_DUPLICATE:
            self.counts["duplicate"] += 1
            return "duplicate"
        self.media_wake.set()
        self.counts[disposition.value] += 1
        return disposition.value

    async def release(self, group: str, msg: Inbound, disposition: str) -> str:
        """Push a message the media job let out of the hold (deduped on its own key: the
        message's was taken when it was held)."""
        pushed = await self._enter(group, msg, Disposition(disposition),
                                   msg.dedupe_id + "#held")
        assert pushed is not None  # only ``behind_hold`` leaves a message unpushed
        return pushed

    async def _enter(self, group: str, msg: Inbound, disposition: Disposition,
                     dedupe_id: str, *, behind_hold: bool = False) -> str | None:
        """Push ``msg``; None (only with ``behind_hold``): the group holds messages for
        their files, nothing was done, the caller holds it behind them."""
        engaged = disposition is Disposition.ENGAGE
        job_id = uuid.uuid4().hex  # the lease holds the id of the job it stands for
        result = await self._q.push(
            group, dedupe_id, encode_entry(msg.model_dump_json(), engaged),
            engaged=engaged, dedupe_ttl=self._cfg.queue.dedupe_ttl,
            lease_ttl_ms=int(self._cfg.queue.lease_ttl * 1000), job_id=job_id,
            behind_hold=behind_hold)
        if result == BEHIND_HOLD:
            return None
        if result == DUPLICATE:
            self.counts["duplicate"] += 1
            return "duplicate"
        if result == KEPT_ENQUEUE:
            # The lease is ours: if this enqueue fails the message is still durable and
            # the sweeper enqueues once the lease expires.
            await self._enqueuer.aenqueue(group, job_id)
        self.counts[disposition.value] += 1
        return disposition.value


    async def _redact(self, group: str) -> None:
        """A deletion or an edit of a message memory may hold: the redaction job takes
        its words out, or puts the new ones in (workers/redaction.py). The change is
        durable in ``changes:{group}`` already, so a failed enqueue is logged, not
        raised: the sweeper enqueues it again once it waited ``CHANGE_STALE`` seconds."""
        try:
            await asyncio.to_thread(self.memory.request_redaction, group)
        except (redis.RedisError, OSError) as err:
            log.warning("could not enqueue the redaction of %s (%s); the change waits "
                        "in changes:%s", group, err, group)


#: seconds a recorded change may wait before the sweeper enqueues its redaction again
CHANGE_STALE = 120
#: seconds between two sweeps for such changes (a SCAN of their keys)
CHANGE_SWEEP_EVERY = 60.0


class Sweeper:
    """Re-enqueues drains for groups with waiting work and no live lease.

    This is how a batch left in ``processing`` by a killed worker gets retried, and how
    a gateway that died between taking a lease and enqueueing is healed.
    """

    def __init__(
        self,
        config: Settings,
        redis_client: aioredis.Redis,
        enqueuer: DrainEnqueuer,
        keys: Keys | None = None,
    ) -> None:
        self._cfg = config
        self._q = GatewayQueue(redis_client, keys or Keys())
        self._enqueuer = enqueuer
        self._memory = MemoryDesk(config, enqueuer.queue, self._q.keys)
        self._redaction_asked: dict[str, float] = {}
        self._changes_swept = 0.0

    async def sweep_changes(self, now: float | None = None) -> list[str]:
        """Enqueue the redaction job of every group whose recorded edits, deletions or
        ``/forget`` requests waited ``CHANGE_STALE`` seconds with no job on them (the
        inbox's enqueue failed, or the job failed for good), at most once per group every
        ``CHANGE_STALE`` seconds; returns those groups. Without it, words a person deleted
        would stay in memory until the group's next change."""
        now = time.time() if now is None else now
        asked = []
        for group in await self._q.stale_changes(CHANGE_STALE, now):
            if now - self._redaction_asked.get(group, 0.0) < CHANGE_STALE:
                continue
            log.warning("edits or deletions of %s waited over %ds with no redaction job; "
                        "enqueueing one", group, CHANGE_STALE)
            await asyncio.to_thread(self._memory.request_redaction, group)
            self._redaction_asked[group] = now
            asked.append(group)
        return asked

    async def sweep_once(self) -> list[str]:
        """One pass; returns the groups a drain was enqueued for.

        A lease whose job still waits in the queue (a long backlog) is extended, so it
        does not get a duplicate; a running job extends its own lease; a lease that
        expired means its job died, and a new one is enqueued.
        """
        ttl_ms = int(self._cfg.queue.lease_ttl * 1000)
        enqueued: list[str] = []
        for group in await self._q.active_groups():
            holder, left = await self._q.lease(group)
            if holder is not None and 0 <= left < ttl_ms / 2 and \
                    await asyncio.to_thread(self._enqueuer.waiting, holder):
                await self._q.extend_lease(group, ttl_ms)
                continue
            job_id = uuid.uuid4().hex
            if await self._q.sweep(group, ttl_ms, job_id):
                log.warning("drain for %s had no live job; re-enqueued", group)
                await self._enqueuer.aenqueue(group, job_id)
                enqueued.append(group)
        return enqueued

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every ``[queue] sweep_interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.sweep_once()
                if time.monotonic() - self._changes_swept >= CHANGE_SWEEP_EVERY:
                    self._changes_swept = time.monotonic()
                    await self.sweep_changes()
            except (redis.RedisError, OSError) as err:
                log.warning("sweeper: Redis unavailable (%s); retrying", err)
            except Exception:
                log.exception("sweeper: unexpected error; retrying")
            await wait_any(self._cfg.queue.sweep_interval, stop)

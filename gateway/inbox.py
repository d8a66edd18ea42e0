"""The inbox: the sink every adapter pushes to.

``await inbox(msg)`` routes the message, dedupes it by ``Inbound.dedupe_id``, pushes it
to its group's mailbox (engaged) or context list (not engaged), and makes sure exactly
one drain job exists for the group, all in one Lua script so a push can never slip
between a finishing job's "mailbox empty?" check and its lease release. It returns only
once Redis accepted the message and raises (``redis.RedisError``) when it could not, so
the adapter does not ack the platform.

Exactly one drain job per group: the script takes the group's lease ``drain:{group}``
(SET NX with a TTL) and only the caller that took it enqueues the RQ job. The running
job renews the lease; the ``Sweeper`` re-enqueues a drain for any active group whose
lease expired (a worker killed with -9, or a gateway that died between the script and
the enqueue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

import redis
import redis.asyncio as aioredis
from rq import Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from channels.keys import DRAIN_JOB, Keys
from channels.models import Inbound
from gateway.config import GatewayConfig
from gateway.frontdesk import FrontDesk
from gateway.router import Disposition, Router

log = logging.getLogger(__name__)

# KEYS: dedupe, seq, target list, lease, active set, status ("" = none)
# ARGV: dedupe ttl s, message json, engaged 1/0, lease ttl ms, group, status value, lease token
# Returns -1 duplicate, 0 kept (no new job needed), 1 kept and the caller must enqueue.
_PUSH = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  if ARGV[6] ~= '' then
    redis.call('SET', KEYS[6], 'duplicate', 'EX', 3600)
  end
  return -1
end
local seq = redis.call('INCR', KEYS[2])
local engaged = ARGV[3] == '1'
local flag = engaged and 'true' or 'false'
local entry = '{"seq":' .. seq .. ',"engaged":' .. flag .. ',"msg":' .. ARGV[2] .. '}'
redis.call('RPUSH', KEYS[3], entry)
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[6], ARGV[6], 'EX', 3600)
end
if not engaged then
  return 0
end
redis.call('SADD', KEYS[5], ARGV[5])
if redis.call('SET', KEYS[4], ARGV[7], 'NX', 'PX', ARGV[4]) then
  return 1
end
return 0
"""

# KEYS: mailbox, processing, lease, active set   ARGV: lease ttl ms, token, group
# Returns 1 when the caller must enqueue a drain (work waiting, no live lease).
_SWEEP = """
if redis.call('LLEN', KEYS[1]) == 0 and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[4], ARGV[3])
  return 0
end
if redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[1]) then
  return 1
end
return 0
"""

#: channels whose clients read back what the inbox did with their message
_STATUS_CHANNELS = frozenset({"local"})


class DrainEnqueuer:
    """Enqueues drain jobs on the RQ queue (JSON serializer, timeout, Retry)."""

    def __init__(self, config: GatewayConfig, sync_redis: redis.Redis, keys: Keys) -> None:
        self._cfg = config
        self._keys = keys
        self._queue = Queue(config.queue.name, connection=sync_redis, serializer="json")

    @property
    def queue(self) -> Queue:
        return self._queue

    def job_kwargs(self) -> dict[str, Any]:
        q = self._cfg.queue
        return {
            "lease_ttl": q.lease_ttl,
            "lock_ttl": q.lock_ttl,
            "max_turns": q.max_turns_per_job,
            "max_attempts": q.max_attempts,
            "queue": q.name,
            "job_timeout": self._cfg.job_timeout,
            "retries": self._cfg.queue.retries,
            "prefix": self._keys.prefix,
        }

    def enqueue(self, group: str, job_id: str | None = None,
                pipeline: redis.client.Pipeline | None = None) -> str:
        """Enqueue the drain job for ``group`` (on ``pipeline`` if given: written when
        the pipeline is executed)."""
        job = self._queue.enqueue_call(
            DRAIN_JOB,
            job_id=job_id,
            kwargs={"group": group, **self.job_kwargs()},
            timeout=self._cfg.job_timeout,
            retry=Retry(max=self._cfg.queue.retries, interval=[1, 5, 30])
            if self._cfg.queue.retries > 0 else None,
            result_ttl=60,
            failure_ttl=7 * 24 * 3600,
            description=f"drain {group}",
            pipeline=pipeline,
        )
        return str(job.id)

    async def aenqueue(self, group: str, job_id: str | None = None,
                       client: aioredis.Redis | None = None) -> str:
        """``enqueue`` from the event loop. With ``client`` (async), RQ's writes go out
        as one MULTI/EXEC on it: one round trip and no thread hop, which is a visible
        part of a message's latency. RQ itself is synchronous, so it writes them to a
        sync pipeline that is never executed and only lends its command list."""
        if client is None:
            return await asyncio.to_thread(self.enqueue, group, job_id)
        if self._queue.redis_server_version is None:
            # RQ asks the server once per queue (blocking I/O: not on the loop)
            await asyncio.to_thread(self._queue.get_redis_server_version)
        recorder = self._queue.connection.pipeline(transaction=False)
        enqueued = self.enqueue(group, job_id, pipeline=recorder)
        async with client.pipeline(transaction=True) as pipe:
            for args, options in recorder.command_stack:
                pipe.execute_command(*args, **options)
            await pipe.execute()
        recorder.reset()
        return enqueued

    def waiting(self, job_id: str) -> bool:
        """True if the job exists and has not started (queued, scheduled for a retry,
        deferred): its lease must not expire just because the queue is long."""
        try:
            job = Job.fetch(job_id, connection=self._queue.connection, serializer="json")
        except NoSuchJobError:
            return False
        status = job.get_status(refresh=False)
        return status in (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED)


class Inbox:
    """The ``InboundSink`` the gateway hands to every channel."""

    def __init__(
        self,
        config: GatewayConfig,
        redis_client: aioredis.Redis,
        enqueuer: DrainEnqueuer,
        keys: Keys | None = None,
    ) -> None:
        self._cfg = config
        self._r = redis_client
        self._keys = keys or Keys()
        self._router = Router(config)
        self._enqueuer = enqueuer
        self._push = self._r.register_script(_PUSH)
        self.front = FrontDesk(config, redis_client, self._keys, self._router)
        self.counts: dict[str, int] = {"engage": 0, "context": 0, "drop": 0, "duplicate": 0,
                                       "command": 0, "pairing": 0}

    @property
    def router(self) -> Router:
        return self._router

    async def __call__(self, msg: Inbound) -> None:
        await self.accept(msg)

    async def accept(self, msg: Inbound) -> str:
        """Like ``__call__`` but returns what happened: engage, context, drop, duplicate,
        command or pairing (answered by the front desk, never seen by the model)."""
        k = self._keys
        status_key = k.status(msg.dedupe_id) if msg.channel in _STATUS_CHANNELS else ""
        route = await self.front.triage(msg, status_key)  # pairing gate, chat commands
        if isinstance(route, str):
            self.counts[route] += 1
            return route
        if route.disposition is Disposition.DROP:
            log.info("dropped message from %s in %s: %s", msg.sender_id, route.group, route.reason)
            if status_key:
                await self._r.set(status_key, "drop", ex=3600)
            self.counts["drop"] += 1
            return "drop"
        engaged = route.disposition is Disposition.ENGAGE
        target = k.mailbox(route.group) if engaged else k.context(route.group)
        job_id = uuid.uuid4().hex  # the lease holds the id of the job it stands for
        result = await self._push(
            keys=[k.dedupe(msg.dedupe_id), k.seq(route.group), target, k.lease(route.group),
                  k.active, status_key or k.status("-")],
            args=[self._cfg.queue.dedupe_ttl, msg.model_dump_json(), "1" if engaged else "0",
                  int(self._cfg.queue.lease_ttl * 1000), route.group,
                  route.disposition.value if status_key else "", job_id],
        )
        if int(result) == -1:
            self.counts["duplicate"] += 1
            return "duplicate"
        if int(result) == 1:
            # The lease is ours: if this enqueue fails the message is still durable and
            # the sweeper enqueues once the lease expires.
            await self._enqueuer.aenqueue(route.group, job_id, self._r)
        self.counts[route.disposition.value] += 1
        return route.disposition.value


class Sweeper:
    """Re-enqueues drains for groups with waiting work and no live lease.

    This is how a batch left in ``processing`` by a killed worker gets retried, and how
    a gateway that died between taking a lease and enqueueing is healed.
    """

    def __init__(
        self,
        config: GatewayConfig,
        redis_client: aioredis.Redis,
        enqueuer: DrainEnqueuer,
        keys: Keys | None = None,
    ) -> None:
        self._cfg = config
        self._r = redis_client
        self._keys = keys or Keys()
        self._enqueuer = enqueuer
        self._sweep = self._r.register_script(_SWEEP)

    async def sweep_once(self) -> list[str]:
        """One pass; returns the groups a drain was enqueued for.

        A lease whose job still waits in the queue (a long backlog) is extended, so it
        does not get a duplicate; a running job extends its own lease; a lease that
        expired means its job died, and a new one is enqueued.
        """
        k = self._keys
        ttl_ms = int(self._cfg.queue.lease_ttl * 1000)
        enqueued: list[str] = []
        groups = [raw.decode() if isinstance(raw, bytes) else str(raw)
                  for raw in await self._r.smembers(k.active)]
        for group in groups:
            holder, left = await self._lease(group)
            if holder is not None and 0 <= left < ttl_ms / 2 and \
                    await asyncio.to_thread(self._enqueuer.waiting, holder):
                await self._r.pexpire(k.lease(group), ttl_ms)
                continue
            job_id = uuid.uuid4().hex
            took = await self._sweep(
                keys=[k.mailbox(group), k.processing(group), k.lease(group), k.active],
                args=[ttl_ms, job_id, group],
            )
            if int(took) == 1:
                log.warning("drain for %s had no live job; re-enqueued", group)
                await self._enqueuer.aenqueue(group, job_id, self._r)
                enqueued.append(group)
        return enqueued

    async def _lease(self, group: str) -> tuple[str | None, int]:
        async with self._r.pipeline(transaction=False) as pipe:
            pipe.get(self._keys.lease(group))
            pipe.pttl(self._keys.lease(group))
            value, left = await pipe.execute()
        if value is None:
            return None, -2
        return (value.decode() if isinstance(value, bytes) else str(value)), int(left)

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every ``[queue] sweep_interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.sweep_once()
            except (redis.RedisError, OSError) as err:
                log.warning("sweeper: Redis unavailable (%s); retrying", err)
            except Exception:
                log.exception("sweeper: unexpected error; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._cfg.queue.sweep_interval)

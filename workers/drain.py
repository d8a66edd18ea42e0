"""The drain job: works through one group's mailbox, one turn at a time.

Enqueued by the gateway (``workers.drain.drain_group``, JSON serializer, a timeout and
a ``Retry``) when a group's mailbox gets its first message and no drain job exists.
The job takes the group's lock, moves everything waiting (context + mailbox) into
``processing`` in one step, runs the turn, clears ``processing`` and loops while the
mailbox is not empty; messages arriving during a turn are the next turn's batch, all of
them. A batch left in ``processing`` by a killed worker is retried as the same turn.
After ``max_turns`` turns the job hands the group to a fresh job so one busy group
cannot hold a worker forever.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from pydantic import ValidationError
from rq import Queue, Retry

from channels.keys import DRAIN_JOB, Keys
from gateway.config import WorkerSettings, load_worker_settings
from workers.connection import job_connection
from workers.lock import GroupLock, LockLost
from workers.maintenance import episode_written
from workers.turn import TurnRunner, parse_batch

log = logging.getLogger(__name__)

#: longest a drain job waits for a group lock someone else holds, seconds
LOCK_WAIT_MAX = 5.0
T = TypeVar("T")

# KEYS: processing, context, mailbox, lock   ARGV: token
# Returns the batch to work on ({} = nothing waiting), or -1 if the lock is not ours.
_TAKE = """
if redis.call('GET', KEYS[4]) ~= ARGV[1] then return -1 end
if redis.call('LLEN', KEYS[1]) > 0 then return redis.call('LRANGE', KEYS[1], 0, -1) end
if redis.call('LLEN', KEYS[3]) == 0 then return {} end
for _, src in ipairs({KEYS[2], KEYS[3]}) do
  local items = redis.call('LRANGE', src, 0, -1)
  for i = 1, #items do redis.call('RPUSH', KEYS[1], items[i]) end
  redis.call('DEL', src)
end
return redis.call('LRANGE', KEYS[1], 0, -1)
"""

# KEYS: lock, lease, processing, context, mailbox   ARGV: token, lock ttl ms, lease ttl ms
# A job's first step in one round trip: take the lock (extending the lease with it, as
# GroupLock.acquire does), then take the batch as _TAKE does. Returns -2 if the lock is
# held by someone else (then the caller waits with GroupLock.acquire), else as _TAKE.
_ACQUIRE_TAKE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return -2 end
if redis.call('PEXPIRE', KEYS[2], ARGV[3]) == 0 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
end
if redis.call('LLEN', KEYS[3]) > 0 then return redis.call('LRANGE', KEYS[3], 0, -1) end
if redis.call('LLEN', KEYS[5]) == 0 then return {} end
for _, src in ipairs({KEYS[4], KEYS[5]}) do
  local items = redis.call('LRANGE', src, 0, -1)
  for i = 1, #items do redis.call('RPUSH', KEYS[3], items[i]) end
  redis.call('DEL', src)
end
return redis.call('LRANGE', KEYS[3], 0, -1)
"""

# KEYS: processing, mailbox, lease, active, lock, turn   ARGV: token, group, written 1/0
# Clears the finished batch (and marks its turn's episode written). Returns 1 if more is
# waiting (keep going), 0 if the group is drained (lease and lock released, atomically
# with the check), -1 if the lock is not ours.
_FINISH = """
if redis.call('GET', KEYS[5]) ~= ARGV[1] then return -1 end
if ARGV[3] == '1' then redis.call('HSET', KEYS[6], 'written', '1') end
redis.call('DEL', KEYS[1])
if redis.call('LLEN', KEYS[2]) > 0 then return 1 end
redis.call('DEL', KEYS[3])
redis.call('SREM', KEYS[4], ARGV[2])
redis.call('DEL', KEYS[5])
return 0
"""

_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0
_settings: WorkerSettings | None = None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on this process's one event loop. One loop per process (not
    ``asyncio.run`` per job) so clients the agent caches stay bound to a live loop; a
    forked work horse gets a fresh loop rather than its parent's epoll."""
    global _loop, _loop_pid
    if _loop is None or _loop_pid != os.getpid() or _loop.is_closed():
        _loop = asyncio.new_event_loop()
        _loop_pid = os.getpid()
    return _loop.run_until_complete(coro)


def worker_settings() -> WorkerSettings:
    """The process's settings, read once from ``$PYNANOCLAW_CONFIG``."""
    global _settings
    if _settings is None:
        _settings = load_worker_settings()
    return _settings


def drain_group(
    group: str,
    *,
    lease_ttl: float = 30.0,
    lock_ttl: float = 30.0,
    max_turns: int = 20,
    max_attempts: int = 5,
    queue: str = "pnc-drain",
    job_timeout: int = 300,
    retries: int = 3,
    prefix: str = "pnc:",
    redis_url: str | None = None,
) -> dict[str, Any]:
    """Drain ``group``'s mailbox. Returns a JSON summary (turns run, how it ended)."""
    client = job_connection(redis_url)
    keys = Keys(prefix)
    lock = GroupLock(client, keys.lock(group), keys.lease(group), ttl=lock_ttl,
                     lease_ttl=lease_ttl)
    first: Any = client.register_script(_ACQUIRE_TAKE)(
        keys=[lock.lock_key, lock.lease_key, keys.processing(group), keys.context(group),
              keys.mailbox(group)],
        args=[lock.token, lock.ttl_ms, lock.lease_ttl_ms])
    if first == -2:
        first = None
        # Waiting covers a predecessor that is just handing over or finishing, and (with
        # short TTLs) a killed holder's lock expiring. A live holder keeps renewing: then
        # this is a duplicate, and it must not keep a worker idle for long.
        if not lock.acquire(timeout=min(lock_ttl * 1.5 + 1, LOCK_WAIT_MAX)):
            log.info("drain %s: lock busy, another job owns the group", group)
            return {"group": group, "turns": 0, "end": "locked"}
    else:
        lock.adopt()
    take = client.register_script(_TAKE)
    finish = client.register_script(_FINISH)
    runner = TurnRunner(client, keys, worker_settings())
    turns = 0
    end = "drained"
    try:
        while True:
            lock.check()
            written: str | None = None
            if first is not None:
                raw, first = first, None
            else:
                raw = take(keys=[keys.processing(group), keys.context(group),
                                 keys.mailbox(group), lock.lock_key], args=[lock.token])
            if raw == -1:
                raise LockLost(lock.lock_key)
            if raw:
                try:
                    batch = parse_batch(group, raw)
                except (ValueError, ValidationError) as err:
                    # cannot happen with entries the inbox wrote; never retry it forever
                    log.error("drain %s: unreadable batch moved to %s: %s", group,
                              keys.dead(group), err)
                    client.rpush(keys.dead(group), *raw)
                else:
                    outcome = run_async(runner.run(batch, lock, max_attempts,
                                                   mark_written=False))
                    written = runner.unmarked_written
                    turns += 1
                    log.info("drain %s: turn %d %s", group, turns, outcome)
                    if written:  # this turn wrote its episode
                        episode_written(client, group, worker_settings(), queue=queue,
                                        prefix=prefix, lock_ttl=lock_ttl)
            lock.stop_renewal()  # the finish script may release the lock itself
            more = int(finish(keys=[keys.processing(group), keys.mailbox(group),
                                    keys.lease(group), keys.active, lock.lock_key,
                                    written or keys.turn("-")],
                              args=[lock.token, group, "1" if written else "0"]))
            if more == -1:
                raise LockLost(lock.lock_key)
            if more == 0:
                lock.held = False
                break
            lock.start_renewal()
            if turns >= max_turns:
                # Hand over while still holding the lease, so no one else enqueues; the
                # lease now stands for the successor (the sweeper keeps it while queued).
                successor = uuid.uuid4().hex
                client.set(keys.lease(group), successor, px=int(lease_ttl * 1000))
                Queue(queue, connection=client, serializer="json").enqueue(
                    DRAIN_JOB,
                    job_id=successor,
                    kwargs={"group": group, "lease_ttl": lease_ttl, "lock_ttl": lock_ttl,
                            "max_turns": max_turns, "max_attempts": max_attempts,
                            "queue": queue, "job_timeout": job_timeout, "retries": retries,
                            "prefix": prefix},
                    job_timeout=job_timeout,
                    retry=Retry(max=retries, interval=[1, 5, 30]) if retries > 0 else None,
                    result_ttl=60,
                    description=f"drain {group}",
                )
                end = "handed-off"
                break
    except LockLost:
        log.error("drain %s: lock lost mid-job; leaving the group to its new owner", group)
        end = "lock-lost"
    finally:
        lock.release()
    return {"group": group, "turns": turns, "end": end}

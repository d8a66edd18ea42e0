"""The per-group turn lock: at most one turn per group across every worker and machine.

A Redis key holding a random token, with a TTL that is renewed every third of the TTL.
Release and renewal check the token (Lua), so a worker that stalled past its TTL cannot
release or extend a lock someone else took since. The renewal also extends the group's
drain lease, so the gateway's sweeper leaves a live job alone; when the worker dies
(kill -9) both expire and the sweeper hands the group to a new job.

One renewal thread per process serves every lock the process holds: starting (and
joining) a thread per job cost about a millisecond per turn on a busy machine.

A linked person's DMs are different groups with different locks, but their turns and
background jobs all use ``persons/<id>/``: each takes the person's lock too
(``person_lock``), always after its group's lock, so two of them never write it at once
and the fixed order cannot deadlock. It has no lease (nothing sweeps for it) and expires
by its TTL when its holder dies; publishing stays fenced by the group lock alone.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from types import TracebackType

import redis
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from gateway.queue import Keys, LockOps
from memory_store import is_person_key

log = logging.getLogger(__name__)

class LockLost(Exception):
    """The group lock expired or was taken over; the turn must not publish or write."""


class PersonBusy(Exception):
    """A person's lock stayed taken (another of their DMs, or their consolidation) past
    the wait: the batch is left in ``processing`` for a later job."""


class _Renewer:
    """The process's renewal thread: renews each registered lock every third of its TTL.

    A renewal that races a deliberate release (the drain's finish script or
    ``release()``) fails its token check and changes nothing in Redis.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[GroupLock, float]] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0

    def add(self, lock: GroupLock) -> None:
        if self._pid != os.getpid():
            # first lock of this process, or a forked child: it has no renewal thread, and
            # the parent's condition may have been held by one at the fork
            self._cond = threading.Condition()
            self._due = {}
            self._thread = None
            self._pid = os.getpid()
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="group-lock renewal",
                                                daemon=True)
                self._thread.start()
            self._due[id(lock)] = (lock, time.monotonic() + lock.ttl_ms / 3000)
            self._cond.notify()

    def remove(self, lock: GroupLock) -> None:
        with self._cond:
            self._due.pop(id(lock), None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [lk for lk, at in self._due.values() if at <= now]
                for lk in due:
                    self._due[id(lk)] = (lk, now + lk.ttl_ms / 3000)
                if not due:
                    nxt = min((at for _, at in self._due.values()), default=None)
                    self._cond.wait(None if nxt is None else max(nxt - now, 0.001))
                    continue
            for lk in due:
                if not lk.renew_once():
                    self.remove(lk)


_renewer = _Renewer()


class GroupLock:
    """The group's lock, kept renewed while held. Take it with ``acquire`` (or, after a
    script took it with the same token, ``adopt``); ``with lock:`` then releases it on
    the way out, whatever happens (entering an unheld lock is an error)."""

    def __init__(
        self,
        client: redis.Redis,
        lock_key: str,
        lease_key: str | None,
        *,
        ttl: float,
        lease_ttl: float,
    ) -> None:
        self.lock_key = lock_key
        self.lease_key = lease_key
        self.ttl_ms = max(int(ttl * 1000), 100)
        self.lease_ttl_ms = max(int(lease_ttl * 1000), 100)
        self.token = secrets.token_hex(16)
        self.held = False
        self.lost = threading.Event()
        self._renewing = False
        self._ops = LockOps(client)

    def acquire(self, timeout: float) -> bool:
        """Take the lock (extending the lease with it), retrying with backoff for up to
        ``timeout`` seconds (a killed holder's lock expires by its TTL). Starts renewal on
        success."""
        took: bool = Retrying(
            retry=retry_if_result(lambda ok: not ok),
            wait=wait_exponential(multiplier=0.01, max=0.25),
            stop=stop_after_delay(timeout),
            retry_error_callback=lambda _state: False,
        )(self._ops.lock_acquire, self.lock_key, self.lease_key, self.token, self.ttl_ms,
          self.lease_ttl_ms)
        if took:
            self.adopt()
        return took

    def adopt(self) -> None:
        """Mark the lock held after the caller took it with its own script (same token,
        TTL and lease extension as ``acquire``), and start renewal."""
        self.held = True
        self.start_renewal()

    def start_renewal(self) -> None:
        """Renew the lock (and the lease) every third of the TTL until ``stop_renewal``."""
        self._renewing = True
        _renewer.add(self)

    def stop_renewal(self) -> None:
        """Stop renewing. A renewal already in flight may still run; it only extends the
        lock if it is still ours, and it fails quietly if the lock was just released."""
        self._renewing = False
        _renewer.remove(self)

    def renew_once(self) -> bool:
        """One renewal (called by the renewal thread). False once the lock is not ours."""
        try:
            ok = self._ops.lock_renew(self.lock_key, self.lease_key, self.token, self.ttl_ms,
                                      self.lease_ttl_ms)
        except (redis.RedisError, OSError) as err:
            log.warning("could not renew %s: %s", self.lock_key, err)
            return True  # try again next period; the TTL has slack for a few misses
        if ok:
            return True
        # Set even when renewal was being stopped: a lock found gone while the caller
        # still believes it holds it (finish said "more") must abandon the next turn.
        self.lost.set()
        if self._renewing:
            log.error("lost %s (expired or taken over); the turn will be abandoned",
                      self.lock_key)
        return False

    def check(self) -> None:
        """Raise ``LockLost`` if renewal noticed the lock is no longer ours."""
        if self.lost.is_set():
            raise LockLost(self.lock_key)

    def release(self) -> None:
        """Stop renewing and release the lock if still ours. Idempotent."""
        self.stop_renewal()
        if self.held:
            self.held = False
            try:
                self._ops.lock_release(self.lock_key, self.token)
            except (redis.RedisError, OSError) as err:
                # it expires by its TTL anyway
                log.warning("could not release %s: %s", self.lock_key, err)

    def __enter__(self) -> GroupLock:
        if not self.held:
            raise RuntimeError(f"{self.lock_key}: take the lock (acquire/adopt) before `with`")
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def person_lock(client: redis.Redis, keys: Keys, memory: str, *, ttl: float
                ) -> GroupLock | None:
    """The lock of ``memory``'s directory if it is a linked person's (``person:<id>``),
    not yet taken; None for a chat's own directory (its group lock covers it)."""
    if not is_person_key(memory):
        return None
    return GroupLock(client, keys.person_lock(memory), None, ttl=ttl, lease_ttl=ttl)

"""The per-group turn lock: at most one turn per group across every worker and machine.

A Redis key holding a random token, with a TTL that a background thread renews every
third of the TTL. Release and renewal check the token (Lua), so a worker that stalled
past its TTL cannot release or extend a lock someone else took since. The renewal also
extends the group's drain lease, so the gateway's sweeper leaves a live job alone; when
the worker dies (kill -9) both expire and the sweeper hands the group to a new job.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from types import TracebackType

import redis

log = logging.getLogger(__name__)

# KEYS: lock, lease   ARGV: token, lock ttl ms, lease ttl ms
# The lease keeps its value (the id of the job it stands for); recreated if it lapsed.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('PEXPIRE', KEYS[2], ARGV[3]) == 0 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
end
return 1
"""

# KEYS: lock   ARGV: token
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class LockLost(Exception):
    """The group lock expired or was taken over; the turn must not publish or write."""


class GroupLock:
    """``with GroupLock(...) as lock:`` holds the group's lock and keeps it renewed."""

    def __init__(
        self,
        client: redis.Redis,
        lock_key: str,
        lease_key: str,
        *,
        ttl: float,
        lease_ttl: float,
    ) -> None:
        self._r = client
        self.lock_key = lock_key
        self.lease_key = lease_key
        self.ttl_ms = max(int(ttl * 1000), 100)
        self.lease_ttl_ms = max(int(lease_ttl * 1000), 100)
        self.token = secrets.token_hex(16)
        self.held = False
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renew = self._r.register_script(_RENEW)
        self._release = self._r.register_script(_RELEASE)

    def acquire(self, timeout: float) -> bool:
        """Take the lock, waiting up to ``timeout`` seconds (a killed holder's lock
        expires by its TTL). Starts renewal on success."""
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            if self._r.set(self.lock_key, self.token, nx=True, px=self.ttl_ms):
                self.held = True
                self._renew(keys=[self.lock_key, self.lease_key],
                            args=[self.token, self.ttl_ms, self.lease_ttl_ms])
                self.start_renewal()
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def start_renewal(self) -> None:
        """Renew the lock (and the lease) every third of the TTL in a daemon thread."""
        if self._thread is not None:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_loop, args=(self._stop,), name=f"renew {self.lock_key}",
            daemon=True,
        )
        self._thread.start()

    def _renew_loop(self, stop: threading.Event) -> None:
        interval = self.ttl_ms / 3000
        while not stop.wait(interval):
            try:
                ok = self._renew(keys=[self.lock_key, self.lease_key],
                                 args=[self.token, self.ttl_ms, self.lease_ttl_ms])
            except (redis.RedisError, OSError) as err:
                log.warning("could not renew %s: %s", self.lock_key, err)
                continue
            if not int(ok):
                log.error("lost %s (expired or taken over); the turn will be abandoned",
                          self.lock_key)
                self.lost.set()
                return

    def check(self) -> None:
        """Raise ``LockLost`` if renewal noticed the lock is no longer ours."""
        if self.lost.is_set():
            raise LockLost(self.lock_key)

    def stop_renewal(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def release(self) -> None:
        """Stop renewing and release the lock if still ours. Idempotent."""
        self.stop_renewal()
        if self.held:
            self.held = False
            try:
                self._release(keys=[self.lock_key], args=[self.token])
            except (redis.RedisError, OSError) as err:
                # it expires by its TTL anyway
                log.warning("could not release %s: %s", self.lock_key, err)

    def __enter__(self) -> GroupLock:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

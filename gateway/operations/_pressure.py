"""Disk and Redis pressure: what ``/healthz`` lists as degraded and ``status`` reports.

A full disk or a full Redis does not stop the bot: Redis answers but refuses writes, the
gateway keeps what it can in memory and waits, and everything resumes once space is
back. These checks say why it waits, in one line each, so the operator knows what to
free. ``DiskGuard`` is the watermark the inbox consults: below ``[disk] stop_free_mb``
it refuses new messages (the platform delivers them again later) instead of taking work
it cannot finish.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

import redis

from gateway.config.sections import DiskConfig

log = logging.getLogger(__name__)

#: Redis memory use, as a share of ``maxmemory``, from which it is reported
MEMORY_WARN = 0.9
#: seconds a free-space reading is reused (the inbox asks once per message)
DISK_CHECK_EVERY = 1.0


def free_mb(path: Path) -> float:
    """Free megabytes (MiB) on the filesystem holding ``path`` (its nearest existing
    ancestor)."""
    for p in (path, *path.parents):
        if p.exists():
            return shutil.disk_usage(p).free / 2**20
    return float("inf")


def disk_problem(path: Path, disk: DiskConfig) -> str | None:
    """One line when free space on ``path`` is below the warning watermark."""
    free = free_mb(path)
    if free < disk.stop_free_mb:
        return (f"disk: {free:.0f} MB free on {path} (below [disk] stop_free_mb = "
                f"{disk.stop_free_mb:g}): new messages are refused until space is freed")
    if free < disk.warn_free_mb:
        return (f"disk: {free:.0f} MB free on {path} (below [disk] warn_free_mb = "
                f"{disk.warn_free_mb:g}); free some space")
    return None


def redis_problems(client: redis.Redis) -> list[str]:
    """Redis' persistence and memory state, one line per problem; raises
    ``redis.RedisError`` when it does not answer."""
    info: dict[str, Any] = {**client.info("persistence"), **client.info("memory")}
    out: list[str] = []
    if info.get("aof_enabled") and info.get("aof_last_write_status", "ok") != "ok":
        out.append("redis: cannot write its append-only file (disk full?); it refuses "
                   "writes until space is freed, then resumes by itself")
    if info.get("rdb_last_bgsave_status", "ok") != "ok":
        out.append("redis: its last snapshot failed (disk full?); it may refuse writes")
    maxmemory = int(info.get("maxmemory") or 0)
    used = int(info.get("used_memory") or 0)
    if maxmemory and used >= MEMORY_WARN * maxmemory:
        policy = str(info.get("maxmemory_policy", ""))
        full = used >= maxmemory and policy == "noeviction"
        out.append(f"redis: memory {used / 2**20:.1f} of {maxmemory / 2**20:.1f} MB "
                   f"(maxmemory, {policy})" + ("; it refuses writes until memory is freed "
                                               "or maxmemory raised" if full else ""))
    return out


class DiskGuard:
    """The watermarks for one data dir: ``refuse()`` is True below the hard one; the
    soft one is logged once each time it is crossed."""

    def __init__(self, data_dir: Path, disk: DiskConfig) -> None:
        self.data_dir = data_dir
        self.disk = disk
        self._checked = 0.0
        self._free = float("inf")
        self._level = 0  #: 0 fine, 1 below warn, 2 below stop (for logging once)

    def free(self) -> float:
        now = time.monotonic()
        if now - self._checked >= DISK_CHECK_EVERY:
            self._checked = now
            self._free = free_mb(self.data_dir)
            level = (2 if self._free < self.disk.stop_free_mb else
                     1 if self._free < self.disk.warn_free_mb else 0)
            if level != self._level:
                problem = disk_problem(self.data_dir, self.disk)
                if problem is not None:
                    (log.error if level == 2 else log.warning)("%s", problem)
                else:
                    log.warning("disk: %.0f MB free on %s again", self._free, self.data_dir)
                self._level = level
        return self._free

    def refuse(self) -> bool:
        return self.free() < self.disk.stop_free_mb

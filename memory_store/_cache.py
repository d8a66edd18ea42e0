"""A process's cache of open group memories: LRU, bounded by count and by memory.

Opening a group costs more than a turn with a fast model (the catalog, the inotify
watch, the vector metadata), so a worker keeps recently used groups open. Without a
bound on memory, a worker serving a few large groups grows to gigabytes, so each entry
is weighed (:meth:`BaseMemory.footprint_bytes`: its arrays, its SQLite cache and the
vector file pages it maps) and the least recently used groups are closed until both the
count and the byte budget hold. The most recent group always stays, even alone over
the budget: the turn in progress needs it.

An entry is dropped and reopened when its directory or its catalog DB was deleted or
replaced (inode changed); edits to memory files are the memory's own business (its
index follows them), and core files are re-read when their mtime or size moves
(:meth:`GroupDirectory.core_memory`). Hits, misses and evictions are counted for the
benchmark (bench/README.md, "Memory").
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_store._base import BaseMemory
from memory_store._factory import open_group
from memory_store.files._group import GroupDirectory

#: Groups kept open: each holds inotify watches (on an instance of its own unless the
#: ``inotify`` option passes one the process shares: the per-user limit is often 128).
DEFAULT_MAX_GROUPS = 16
#: Resident memory the open groups may take together (RSS of the bench: ~300 MB for a
#: hybrid group of 100,000 records, ~10 MB for a file-backend group).
DEFAULT_MAX_BYTES = 1024 * 1024 * 1024

Opener = Callable[..., BaseMemory]
Key = tuple[str, str, str]


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    invalidations: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@dataclass
class _Entry:
    memory: BaseMemory
    identity: tuple[int, int]


def _identity(gd: GroupDirectory) -> tuple[int, int]:
    """Inodes of the group directory and its catalog DB: each changes (or vanishes)
    when someone deletes or replaces the group or its index."""
    out = []
    for path in (gd.path, gd.index_dir / "catalog.sqlite3"):
        try:
            out.append(os.stat(path).st_ino)
        except FileNotFoundError:
            out.append(-1)
    return out[0], out[1]


class MemoryCache:
    """Open memories by (data dir, group, backend), least recently used closed first."""

    def __init__(self, *, max_groups: int = DEFAULT_MAX_GROUPS,
                 max_bytes: int = DEFAULT_MAX_BYTES, opener: Opener = open_group,
                 **options: Any) -> None:
        if max_groups < 1 or max_bytes < 0:
            raise ValueError("max_groups must be >= 1 and max_bytes >= 0")
        self.max_groups = max_groups
        self.max_bytes = max_bytes
        self.opener = opener
        self.options = options
        self.stats = CacheStats()
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._mu = threading.Lock()
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, data_dir: Path, group: str,
            backend: str) -> tuple[GroupDirectory, BaseMemory]:
        """The group's directory (ensured) and its open memory."""
        with self._mu:
            if self._pid != os.getpid():
                # A forked child must not share its parent's watchers and threads.
                self._entries.clear()
                self._pid = os.getpid()
            key = (str(data_dir), group, backend)
            entry = self._entries.get(key)
            if entry is not None:
                gd = entry.memory.group
                if _identity(gd) == entry.identity:
                    self._entries.move_to_end(key)
                    self.stats.hits += 1
                    if not gd.core_path.exists():  # only a deleted CLAUDE.md is re-made
                        gd.ensure()
                    return gd, entry.memory
                self.stats.invalidations += 1
                del self._entries[key]
                entry.memory.close()
            self.stats.misses += 1
            gd = GroupDirectory(Path(data_dir), group).ensure()
            memory = self.opener(gd, backend, **self.options)
            self._entries[key] = _Entry(memory, _identity(gd))
            self._evict()
            return gd, memory

    def footprint_bytes(self) -> int:
        """What the open groups hold now, by their own estimate."""
        return sum(e.memory.footprint_bytes() for e in self._entries.values())

    def _evict(self) -> None:
        while len(self._entries) > 1 and (len(self._entries) > self.max_groups
                                          or self.footprint_bytes() > self.max_bytes):
            _, old = self._entries.popitem(last=False)
            self.stats.evictions += 1
            old.memory.close()

    def close(self) -> None:
        """Close every open memory (at exit); only in the process that opened them."""
        with self._mu:
            if self._pid != os.getpid():
                self._entries.clear()
                return
            while self._entries:
                _, entry = self._entries.popitem()
                entry.memory.close()

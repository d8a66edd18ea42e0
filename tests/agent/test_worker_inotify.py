"""Issue 20, item 8: a worker watches all its open groups with one inotify instance.

One instance per open group hit the kernel's per-user limit (fs.inotify.max_user_instances,
128 by default, shared by every process of the user) with a few workers, and the groups
past it fell back to polling (a full scan per search).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest
import redis

from gateway.config import load_worker_settings
from memory_store.files import MEMORY_DIRS
from memory_store.index import Inotify, InotifyWatcher
from workers.context import WorkerContext

GROUPS = 300


def inotify_instances() -> int:
    """inotify instances this process holds open."""
    fds = Path("/proc/self/fd")
    count = 0
    for fd in os.listdir(fds):
        try:
            count += os.readlink(fds / fd) == "anon_inode:inotify"
        except OSError:  # closed meanwhile (the listing's own fd)
            continue
    return count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_300_open_groups_share_one_instance_and_changes_are_still_seen(
    tmp_path: Path,
) -> None:
    config = tmp_path / "pynanoclaw.toml"
    config.write_text('data_dir = "data"\n[memory]\nbackend = "file"\n', encoding="utf-8")
    before = inotify_instances()
    ctx = WorkerContext(load_worker_settings(config, env={}),
                        redis.Redis())  # never connected: no job runs here
    # a worker keeping this many groups open at once (the default keeps fewer; the byte
    # budget counts each empty group's SQLite page cache at its ceiling)
    ctx.memories.max_groups = GROUPS
    ctx.memories.max_bytes = 1 << 40
    try:
        memories = []
        for i in range(GROUPS):
            gd, mem = ctx.group_memory(f"local:g{i}")
            assert mem.search_sync("kayak", k=1) == []  # the first poll: a full scan
            memories.append((gd, mem))
        assert len(ctx.memories) == GROUPS
        # every group on inotify (none fell back to polling), all on one instance
        assert all(isinstance(m.catalog._watcher, InotifyWatcher) for _, m in memories)
        assert inotify_instances() - before == 1
        # one watch per memory folder of each group (no shards yet): watches are not
        # recursive, and nothing else is watched
        assert ctx.inotify is not None
        assert ctx.inotify.watches() == GROUPS * len(MEMORY_DIRS)

        # a hand edit in any group is noticed by that group's next search, and only
        # there (another group's search does not see it)
        for i, (gd, _) in enumerate(memories):
            (gd.path / "notes" / "hand.md").write_text(f"Group {i} owns kayak k{i}.\n")
        for i, (_, mem) in enumerate(memories):
            hits = mem.search_sync("kayak", k=5)
            assert [h.content.strip() for h in hits] == [f"Group {i} owns kayak k{i}."]
    finally:
        ctx.close()
    assert ctx.inotify.closed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_shared_watches_outlive_one_of_their_watchers(tmp_path: Path) -> None:
    """Two watchers of one folder share the kernel's watch (inotify gives the same
    descriptor back): closing one must not blind the other, and a watcher dropped
    without close() gives its watches back."""
    inotify = Inotify()
    try:
        top = tmp_path / "episodes"
        a = InotifyWatcher([top], check_interval=3600.0, inotify=inotify)
        b = InotifyWatcher([top], check_interval=3600.0, inotify=inotify)
        assert inotify.watches() == 1
        assert a.poll() is None and b.poll() is None  # each one's first full scan
        (top / "x.md").write_text("x")
        assert a.poll() == {top / "x.md"}
        a.close()
        (top / "y.md").write_text("y")
        assert b.poll() == {top / "x.md", top / "y.md"}  # b's events waited for it
        del b
        gc.collect()
        assert inotify.watches() == 0
    finally:
        inotify.close()

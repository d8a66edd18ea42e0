"""The per-process cache of open group memories (memory_store/_cache.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from memory_store import MemoryCache


def test_lru_by_count_keeps_the_most_recent(tmp_path: Path) -> None:
    cache = MemoryCache(max_groups=2)
    try:
        _, a = cache.get(tmp_path, "t:a", "file")
        cache.get(tmp_path, "t:b", "file")
        assert cache.get(tmp_path, "t:a", "file")[1] is a  # hit, and now most recent
        cache.get(tmp_path, "t:c", "file")                  # evicts b, not a
        assert len(cache) == 2
        assert cache.get(tmp_path, "t:a", "file")[1] is a
        cache.get(tmp_path, "t:b", "file")                  # a miss again
        assert (cache.stats.hits, cache.stats.misses, cache.stats.evictions) == (2, 4, 2)
        assert cache.stats.hit_rate == pytest.approx(2 / 6)
    finally:
        cache.close()


def test_bounded_by_memory_but_never_below_one(tmp_path: Path) -> None:
    cache = MemoryCache(max_groups=16, max_bytes=1)  # every group is over budget
    try:
        _, a = cache.get(tmp_path, "t:a", "file")
        assert a.footprint_bytes() > 1
        _, b = cache.get(tmp_path, "t:b", "file")
        assert len(cache) == 1                       # a was closed to make room
        assert cache.get(tmp_path, "t:b", "file")[1] is b
        assert cache.footprint_bytes() == b.footprint_bytes()
    finally:
        cache.close()


def test_replaced_index_reopens_the_group(tmp_path: Path) -> None:
    cache = MemoryCache()
    try:
        gd, mem = cache.get(tmp_path, "t:a", "file")
        mem.write_sync("Ann likes tea", kind="fact", metadata={"id": "tea"})
        mem.close()
        shutil.rmtree(gd.index_dir)
        gd.index_dir.mkdir()
        _, again = cache.get(tmp_path, "t:a", "file")
        assert again is not mem and cache.stats.invalidations == 1
        assert [h.id for h in again.search_sync("tea", k=1)] == ["tea"]
    finally:
        cache.close()


def test_core_memory_is_reread_only_when_a_file_changes(tmp_path: Path) -> None:
    cache = MemoryCache()
    try:
        gd, _ = cache.get(tmp_path, "t:a", "file")
        first = gd.core_memory()
        assert gd.core_memory() is first                  # unchanged: the cached object
        gd.core_path.write_text("# Group\nAnn is the admin, and likes tea.\n")
        changed = gd.core_memory()
        assert "likes tea" in changed.group_md and changed is not first
    finally:
        cache.close()

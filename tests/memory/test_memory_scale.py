"""Memory at scale: embedding off the write path, sharded episodes, incremental change
detection (issue 12)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_store import open_memory
from memory_store.backends.vector import VectorMemory
from memory_store.index import InotifyWatcher, default_embedder

GROUP = "t:scale"
TEXT = "Ann adores green tea with jasmine."
#: Shares no content word with TEXT: only the vectors can find it.
PARAPHRASE = "which beverage does she enjoy"


def _open(data: Path, backend: str = "vector") -> VectorMemory:
    mem = open_memory(data, GROUP, backend, embedder=default_embedder(), background=False)
    assert isinstance(mem, VectorMemory)
    return mem


@pytest.mark.parametrize("backend", ["vector", "hybrid"])
def test_found_by_text_at_once_and_by_vector_once_embedded(tmp_path: Path,
                                                          backend: str) -> None:
    mem = _open(tmp_path, backend)
    try:
        mid = mem.write_sync(TEXT, kind="fact", metadata={"id": "tea"})
        assert len(mem.dense.pending) == 1  # written, not embedded
        assert [h.id for h in mem.search_sync("green tea", k=3)] == [mid]
        assert mem.search_sync(PARAPHRASE, k=3) == []
        mem.flush()
        assert not mem.dense.pending
        assert [h.id for h in mem.search_sync(PARAPHRASE, k=3)] == [mid]
        assert [h.id for h in mem.search_sync("green tea", k=3)] == [mid]
    finally:
        mem.close()


_CRASH = textwrap.dedent("""
    import os, sys
    from memory_store import open_memory
    mem = open_memory(sys.argv[1], sys.argv[2], "vector", background=False)
    mem.write_sync(sys.argv[3], kind="fact", metadata={"id": "tea"})
    os._exit(0)  # a crash: no close, no embedding
""")


def test_a_write_survives_a_crash_before_embedding(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", _CRASH, str(tmp_path), GROUP, TEXT], check=True,
                   env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    mem = _open(tmp_path)
    try:
        rowid = mem.catalog.conn.execute("SELECT rowid FROM docs WHERE id='tea'").fetchone()
        assert rowid is not None and mem.dense.pending == {rowid[0]}
        assert [h.id for h in mem.search_sync("jasmine tea", k=3)] == ["tea"]
        assert mem.search_sync(PARAPHRASE, k=3) == []
        mem.flush()
        assert [h.id for h in mem.search_sync(PARAPHRASE, k=3)] == ["tea"]
    finally:
        mem.close()


def test_background_thread_embeds_without_flush(tmp_path: Path) -> None:
    mem = open_memory(tmp_path, GROUP, "vector", embedder=default_embedder())
    assert isinstance(mem, VectorMemory)
    try:
        mem.write_sync(TEXT, kind="fact", metadata={"id": "tea"})
        for _ in range(600):  # bounded: up to a minute on a busy machine
            if not mem.dense.pending:
                break
            time.sleep(0.1)
        assert not mem.dense.pending
        assert [h.id for h in mem.search_sync(PARAPHRASE, k=1)] == ["tea"]
    finally:
        mem.close()


def test_episodes_are_sharded_by_month(tmp_path: Path) -> None:
    mem = open_memory(tmp_path, GROUP, "file")
    try:
        for i, month in enumerate((5, 5, 6)):
            when = datetime(2024, month, 10 + i, tzinfo=UTC).isoformat()
            mem.write_sync(f"turn {i} about kayaks", kind="episode",
                           metadata={"id": f"e{i}", "created": when})
        mem.write_sync("Ann likes kayaks", kind="fact", metadata={"id": "f"})
        files = sorted(p.relative_to(mem.group.path).as_posix()
                       for p in mem.group.memory_files())
        assert files == ["entities/f.md", "episodes/2024-05/e0.md", "episodes/2024-05/e1.md",
                         "episodes/2024-06/e2.md"]
        assert {h.id for h in mem.search_sync("kayaks", k=10)} == {"e0", "e1", "e2", "f"}
        assert mem.read_sync("e2").content == "turn 2 about kayaks"
        mem.delete_sync("e1")
        assert not (mem.group.path / "episodes/2024-05/e1.md").exists()
    finally:
        mem.close()


@pytest.mark.parametrize("watch", ["auto", "poll"])
def test_hand_made_shards_are_seen_and_removed(tmp_path: Path, watch: str) -> None:
    mem = open_memory(tmp_path, GROUP, "file", watch=watch)
    try:
        assert mem.search_sync("canoe", k=5) == []
        shard = mem.group.path / "episodes" / "2023-01"
        shard.mkdir()
        (shard / "old.md").write_text("We rented a canoe on the lake.\n")
        assert [h.id for h in mem.search_sync("canoe", k=5)] == ["old"]
        (shard / "old.md").unlink()
        shard.rmdir()
        assert mem.search_sync("canoe", k=5) == []
    finally:
        mem.close()


def test_change_detection_has_no_timed_full_scan(tmp_path: Path) -> None:
    top = tmp_path / "episodes"
    (top / "2024-05").mkdir(parents=True)
    w = InotifyWatcher([top], check_interval=0.0)
    try:
        assert w.poll() is None  # the first poll asks for the one full scan
        # Interval elapsed, nothing changed: an empty set, never another full scan.
        assert w.poll() == set()
        assert w.poll() == set()
        (top / "2024-05" / "a.md").write_text("x")
        # The file, and (safety net: its folder's mtime moved) that one folder.
        assert w.poll() == {top / "2024-05" / "a.md", top / "2024-05"}
        assert w.poll() == set()
    finally:
        w.close()


def test_new_shards_are_watched(tmp_path: Path) -> None:
    top = tmp_path / "episodes"
    (top / "2024-05").mkdir(parents=True)
    w = InotifyWatcher([top], check_interval=3600.0)
    try:
        assert w.poll() is None
        (top / "2024-05" / "a.md").write_text("x")
        assert w.poll() == {top / "2024-05" / "a.md"}
        (top / "2024-06").mkdir()
        (top / "2024-06" / "b.md").write_text("y")
        changed = w.poll()
        assert changed is not None and top / "2024-06" in changed
        (top / "2024-06" / "c.md").write_text("z")  # the new shard is watched now
        assert w.poll() == {top / "2024-06" / "c.md"}
    finally:
        w.close()


# The docs table of schema 1 (before episodes were sharded): no ``dir`` column, which
# this version's schema indexes. A user upgrading keeps such an index on disk.
_SCHEMA_1 = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
INSERT INTO meta VALUES('schema', '1');
CREATE TABLE docs(rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
                  path TEXT NOT NULL UNIQUE, mtime_ns INTEGER, size INTEGER, hash TEXT);
"""


def test_an_index_from_an_older_version_is_rebuilt_from_the_files(tmp_path: Path) -> None:
    import sqlite3

    mem = open_memory(tmp_path, GROUP, "file")
    mid = mem.write_sync(TEXT, kind="fact", metadata={"id": "tea"})
    db = mem.catalog.db_path
    mem.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    old = sqlite3.connect(db)
    old.executescript(_SCHEMA_1)
    old.close()

    mem = open_memory(tmp_path, GROUP, "file")  # must not fail on the old schema
    try:
        assert [h.id for h in mem.search_sync("green tea", k=3)] == [mid]
    finally:
        mem.close()


def test_the_filler_finds_its_next_rows_by_index_in_an_older_index_too(tmp_path: Path
                                                                      ) -> None:
    """The next free slot and sentence row are asked for every batch: a scan of the
    vectors table there made a million-record build quadratic. An index written before
    the vecs_cend index existed gets it on open."""
    import sqlite3

    from memory_store.index import next_dense_slots

    mem = _open(tmp_path)
    mem.write_sync("One. Two sentences here.", kind="fact", metadata={"id": "a"})
    mem.flush()
    db = mem.catalog.db_path
    mem.close()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX vecs_cend")  # as an older version wrote it
    mem = _open(tmp_path)
    try:
        conn = mem.catalog.conn
        plan = " ".join(str(r) for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT (SELECT coalesce(max(slot), -1) + 1 FROM vecs),"
            " (SELECT coalesce(max(cstart + ccount), 0) FROM vecs)"))
        assert "INDEX vecs_slot" in plan and "INDEX vecs_cend" in plan, plan
        assert next_dense_slots(conn) == (1, 2)  # one record, two sentence rows
        mem.write_sync("Three. Four. Five.", kind="fact", metadata={"id": "b"})
        mem.flush()
        assert next_dense_slots(conn) == (2, 5)
    finally:
        mem.close()

"""The index's SQLite file meeting a full disk (SQLITE_FULL, "database or disk is full")
is reported as ENOSPC like any other write, so a turn waits for space instead of being
dead-lettered for it. SQLite's ``max_page_count`` makes the real SQLITE_FULL without
filling a disk."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from memory_helpers import GROUP

from memory_store import open_memory


def test_a_full_index_is_enospc_and_the_retried_write_is_indexed(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "data", GROUP, "file")
    try:
        mem.write_sync("first note", kind="note", metadata={"id": "n-first"})
        conn = mem.catalog.conn
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(OSError) as caught:
            mem.write_sync("second note " + "lorem ipsum " * 2000, kind="note",
                           metadata={"id": "n-second"})
        assert caught.value.errno == errno.ENOSPC
        conn.execute("PRAGMA max_page_count = 1073741823")
        # the retry (a retried turn re-writes the same id) finds the file and the index
        # catches up with it
        assert mem.write_sync("second note", kind="note", metadata={"id": "n-second"}) \
            == "n-second"
        assert [r.id for r in mem.search_sync("lorem ipsum", k=5)] == ["n-second"]
    finally:
        mem.close()

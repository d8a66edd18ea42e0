"""Scrubbing the catalog after a redaction, so no removed byte stays under ``.index/``.

The catalog zeroes rows as they are deleted or replaced (``secure_delete``, set when it
opens), so what is left is to merge the FTS5 segments (a deleted row's terms stay in the
old segments until then; the merge frees them, zeroed) and truncate the WAL, whose
frames still hold the old pages. No VACUUM: a rewrite of the whole index, minutes at a
million records.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memory_store.index._catalog import Catalog

#: how long the truncation is retried while another process checkpoints, seconds
TRUNCATE_PATIENCE = 2.0
_STEP = 0.05


def scrub_catalog(cat: Catalog) -> bool:
    """Merge the FTS5 index and truncate the WAL; False if the WAL is still not empty.

    The busy timeout already waits out readers and writers, but not another process's
    checkpoint (a worker's automatic one after its commit): SQLite answers busy at once
    while one runs, and the WAL would keep the removed words. So retry."""
    with cat.lock:
        conn = cat.conn
        conn.execute("INSERT INTO fts(fts) VALUES('optimize')")
        deadline = time.monotonic() + TRUNCATE_PATIENCE
        while True:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy or time.monotonic() >= deadline:
                return not busy
            time.sleep(_STEP)

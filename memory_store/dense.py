"""Dense vector index: a float32 matrix in RAM, persisted as blobs in the catalog DB.

Brute-force dot product over L2-normalized rows is exact and fast enough here
(100k x 384 is ~150 MB and one matrix-vector product of a few ms). The rows live in
table ``vecs`` of ``.index/catalog.sqlite3`` so they share the catalog's transactions:
the index can never hold a vector for a record it does not know, and deleting
``.index/`` drops both.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memory_store.catalog import Progress, index_text, record_from_json
from memory_store.embed import Embedder, Vectors
from memory_store.protocol import MemoryRecord

log = logging.getLogger(__name__)

_SCHEMA = "CREATE TABLE IF NOT EXISTS vecs(rowid INTEGER PRIMARY KEY, vec BLOB NOT NULL)"
_INF = math.inf


class DenseIndex:
    """An :class:`~memory_store.catalog.IndexHook` holding one embedding per record."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._mu = threading.RLock()
        self._reset(0)

    def _reset(self, capacity: int) -> None:
        cap = max(capacity, 64)
        self._n = 0
        self._rowids = np.zeros(cap, dtype=np.int64)
        self._mat = np.zeros((cap, self.embedder.dim), dtype=np.float32)
        self._created = np.zeros(cap, dtype=np.float64)
        self._trust = np.zeros(cap, dtype=np.float64)
        self._valid_to = np.full(cap, _INF, dtype=np.float64)
        self._pos: dict[int, int] = {}

    def __len__(self) -> int:
        return self._n

    # -- IndexHook ----------------------------------------------------------------------

    def attach(self, conn: sqlite3.Connection) -> None:
        """Load every vector; embed records that have none (new dir, other backend, other
        model), replacing all vectors when the model changed."""
        with self._mu:
            conn.execute(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key='dense_model'").fetchone()
            if row is None or row[0] != self.embedder.model_id:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("DELETE FROM vecs")
                conn.execute("INSERT OR REPLACE INTO meta VALUES('dense_model', ?)",
                             (self.embedder.model_id,))
                conn.execute("COMMIT")
            missing = conn.execute(
                "SELECT d.rowid, d.record FROM docs d LEFT JOIN vecs v ON v.rowid = d.rowid"
                " WHERE v.rowid IS NULL").fetchall()
            if missing:
                log.info("embedding %d records without vectors", len(missing))
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._store(conn, [(int(r), record_from_json(j)) for r, j in missing], None)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            self._load(conn)

    def _load(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute(
            "SELECT v.rowid, v.vec, d.created, d.trust, d.valid_to FROM vecs v"
            " JOIN docs d ON d.rowid = v.rowid").fetchall()
        self._reset(len(rows) * 5 // 4)
        if not rows:
            return
        n = len(rows)
        self._mat[:n] = np.frombuffer(b"".join(r[1] for r in rows),
                                      dtype=np.float32).reshape(n, self.embedder.dim)
        self._rowids[:n] = [r[0] for r in rows]
        self._created[:n] = [r[2] for r in rows]
        self._trust[:n] = [r[3] for r in rows]
        self._valid_to[:n] = [_INF if r[4] is None else r[4] for r in rows]
        self._n = n
        self._pos = {int(r[0]): i for i, r in enumerate(rows)}

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        with self._mu:
            for rowid in deletes:
                conn.execute("DELETE FROM vecs WHERE rowid=?", (rowid,))
                self._remove(rowid)
            if upserts:
                self._store(conn, list(upserts), progress)

    def committed(self) -> None:
        return None

    def rolled_back(self, conn: sqlite3.Connection) -> None:
        with self._mu:
            self._load(conn)

    # -- internals --------------------------------------------------------------------

    def _store(self, conn: sqlite3.Connection, items: list[tuple[int, MemoryRecord]],
               progress: Progress | None) -> None:
        step = 256
        for start in range(0, len(items), step):
            chunk = items[start : start + step]
            vecs = self.embedder.embed([index_text(rec) for _, rec in chunk])
            conn.executemany("INSERT OR REPLACE INTO vecs(rowid, vec) VALUES(?, ?)",
                             [(rowid, vecs[i].tobytes()) for i, (rowid, _) in enumerate(chunk)])
            for i, (rowid, rec) in enumerate(chunk):
                self._put(rowid, vecs[i], rec)
            if progress is not None:
                progress(start + len(chunk), len(items))

    def _put(self, rowid: int, vec: Vectors, rec: MemoryRecord) -> None:
        i = self._pos.get(rowid)
        if i is None:
            if self._n == len(self._rowids):
                self._grow()
            i = self._n
            self._n += 1
            self._pos[rowid] = i
            self._rowids[i] = rowid
        self._mat[i] = vec
        self._created[i] = rec.created.timestamp()
        self._trust[i] = rec.trust
        self._valid_to[i] = rec.valid_to.timestamp() if rec.valid_to else _INF

    def _grow(self) -> None:
        cap = len(self._rowids) * 2
        self._rowids = np.resize(self._rowids, cap)
        mat = np.zeros((cap, self.embedder.dim), dtype=np.float32)
        mat[: self._n] = self._mat[: self._n]
        self._mat = mat
        self._created = np.resize(self._created, cap)
        self._trust = np.resize(self._trust, cap)
        self._valid_to = np.resize(self._valid_to, cap)

    def _remove(self, rowid: int) -> None:
        i = self._pos.pop(rowid, None)
        if i is None:
            return
        last = self._n - 1
        if i != last:
            moved = int(self._rowids[last])
            for arr in (self._rowids, self._mat, self._created, self._trust, self._valid_to):
                arr[i] = arr[last]
            self._pos[moved] = i
        self._n = last

    # -- queries ----------------------------------------------------------------------

    def search(self, query_vec: Vectors, k: int, *, now: float,
               allowed: Sequence[int] | None = None,
               include_superseded: bool = False) -> list[tuple[int, float]]:
        """Top ``k`` (rowid, cosine) among live rows (``valid_to`` after ``now`` unless
        ``include_superseded``), restricted to ``allowed`` rowids when given."""
        with self._mu:
            n = self._n
            if n == 0 or k <= 0:
                return []
            scores = self._mat[:n] @ query_vec.reshape(-1)
            mask: npt.NDArray[np.bool_] | None = None
            if not include_superseded:
                mask = self._valid_to[:n] > now
            if allowed is not None:
                allow = np.isin(self._rowids[:n], np.fromiter(allowed, dtype=np.int64))
                mask = allow if mask is None else (mask & allow)
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)
            kk = min(k, n)
            top = np.argpartition(-scores, kk - 1)[:kk]
            top = top[np.argsort(-scores[top], kind="stable")]
            return [(int(self._rowids[i]), float(scores[i])) for i in top
                    if scores[i] != -np.inf]

    def signals(self, rowids: Sequence[int]) -> dict[int, tuple[float, float]]:
        """rowid -> (created, trust) for rows this index holds."""
        with self._mu:
            out: dict[int, tuple[float, float]] = {}
            for r in rowids:
                i = self._pos.get(r)
                if i is not None:
                    out[r] = (float(self._created[i]), float(self._trust[i]))
            return out

"""Dense vector index: int8 vectors in memory-mapped files, floats in the catalog DB.

What gets embedded is in :mod:`memory_store.index._dense_text`: the whole text, each sentence,
and for episodes a *window* (the turn with its session neighbours). A record's score is

    base   = (whole + best_sentence) / 2          (whole alone without sentences)
    score  = (base + WINDOW_WEIGHT * window) / (1 + WINDOW_WEIGHT)   (base w/o window)

then episodes are smoothed with their neighbours in time (``score += smooth *
mean(prev, next)``), because a turn is often only understandable with the turns around it.
Everything but the best sentence is linear in the query, so the whole and window
vectors are folded into one *combined* vector per record and one dot product scores
both: 384 bytes per record (int8, :mod:`memory_store.index._vecfile`) plus its sentences.

The float vectors (float16 blobs in tables ``vecs`` and ``wvecs`` of the catalog) are
the truth the int8 files are rebuilt from; rows are *slots* in the files, recorded in
``vecs.slot``. A record without a ``vecs`` row is *pending*: found by text until
:class:`memory_store.index._dense_fill.DenseFiller` embeds it in the background (batches, off
the reply path). A pending record survives a crash, because pending is simply "no
vector row yet", recomputed on open.
"""

from __future__ import annotations

import logging
import math
import secrets
import sqlite3
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from memory_store._protocol import MemoryRecord
from memory_store.index._catalog import Progress
from memory_store.index._dense_query import DenseQueries, IntArray
from memory_store.index._dense_text import MAX_CHUNKS, SESSION_GAP, adjacent, digest, record_texts
from memory_store.index._embed import Embedder, Vectors
from memory_store.index._vecfile import VecFile

log = logging.getLogger(__name__)

_SCHEMA = ("CREATE TABLE IF NOT EXISTS vecs(rowid INTEGER PRIMARY KEY, slot INTEGER NOT NULL,"
           " cstart INTEGER NOT NULL, ccount INTEGER NOT NULL, vec BLOB NOT NULL,"
           " h TEXT NOT NULL);"
           "CREATE INDEX IF NOT EXISTS vecs_slot ON vecs(slot);"
           # Window vectors; an empty blob records "computed, no neighbour in the
           # session"; dirty: a neighbour changed, the window must be checked again.
           "CREATE TABLE IF NOT EXISTS wvecs(rowid INTEGER PRIMARY KEY, vec BLOB NOT NULL,"
           " h TEXT NOT NULL, dirty INTEGER NOT NULL DEFAULT 0);")
#: The end of the sentence rows in use: every batch of the filler asks for it, and
#: without this index that is a scan of the whole table (GBs at a million records).
#: Created on every open, so an index written before it gets it too (once).
_CEND_INDEX = "CREATE INDEX IF NOT EXISTS vecs_cend ON vecs(cstart + ccount)"
#: Bump when the stored layout or what gets embedded changes: vectors are rebuilt.
_LAYOUT = "v3"
_INF = math.inf
_Array = TypeVar("_Array", bound=npt.NDArray[Any])
#: Weight of the mean neighbour score added to an episode's score.
DEFAULT_SMOOTH = 0.5
#: Weight of an episode's window vector score against its own score.
WINDOW_WEIGHT = 0.5
#: Records whose sentence vectors a search scores (the best by their combined vector;
#: 0: every record). Chosen on LoCoMo's tuning conversation (bench/README.md).
RERANK = 1000


def next_dense_slots(conn: sqlite3.Connection) -> tuple[int, int]:
    """(first free slot, first free sentence row), from the indexes: one scalar
    subquery each, as a single ``max(a), max(b)`` query would scan the table."""
    slot, cslot = conn.execute(
        "SELECT (SELECT coalesce(max(slot), -1) + 1 FROM vecs),"
        " (SELECT coalesce(max(cstart + ccount), 0) FROM vecs)").fetchone()
    return int(slot), int(cslot)


def f16(vecs: npt.NDArray[np.floating]) -> bytes:
    return np.ascontiguousarray(vecs, dtype=np.float16).tobytes()


def from_f16(blob: bytes, dim: int) -> Vectors:
    out: Vectors = np.frombuffer(blob, dtype=np.float16).astype(np.float32).reshape(-1, dim)
    return out


def grown(a: _Array, size: int, fill: object) -> _Array:
    """``a`` with room for ``size`` entries (doubled at least), new ones ``fill``; ``a``
    itself when it has room."""
    if size <= len(a):
        return a
    out = np.full(max(size, 2 * len(a)), fill, dtype=a.dtype)
    out[: len(a)] = a
    return cast(_Array, out)


class DenseIndex(DenseQueries):
    """An :class:`~memory_store.index._catalog.IndexHook` holding the vectors of every record."""

    def __init__(self, embedder: Embedder, index_dir: Path, *,
                 smooth: float = DEFAULT_SMOOTH, window_weight: float = WINDOW_WEIGHT,
                 session_gap: float = SESSION_GAP, rerank: int = RERANK) -> None:
        self.embedder = embedder
        self.rerank = rerank
        self.index_dir = Path(index_dir)
        self.smooth = smooth
        self.window_weight = window_weight
        self.session_gap = session_gap
        self._mu = threading.RLock()
        # Rowids without vectors (in flight too: a search must still find them by text)
        # and episodes whose window must be checked; the deques give the filler an
        # order (oldest first) without sorting a million-entry set per batch.
        self.pending: set[int] = set()
        self.wpending: set[int] = set()
        self._queue: deque[int] = deque()
        self._wqueue: deque[int] = deque()
        self.wake = threading.Event()    # set when there is work for the filler
        self.mat: VecFile | None = None
        self.cmat: VecFile | None = None
        self._reset(0, 0)

    def _reset(self, slots: int, cslots: int) -> None:
        self._n = slots
        self._m = cslots
        self._rowid = np.full(slots, -1, dtype=np.int64)
        self._created = np.zeros(slots, dtype=np.float64)
        self._trust = np.zeros(slots, dtype=np.float64)
        self._valid_to = np.full(slots, _INF, dtype=np.float64)
        self._episode = np.zeros(slots, dtype=bool)
        self._bw = np.zeros(slots, dtype=np.float32)   # weight of the best sentence
        self._cowner = np.full(cslots, -1, dtype=np.int64)
        self._slot_of = np.full(0, -1, dtype=np.int64)
        self._neighbours: tuple[IntArray, IntArray] | None = None
        self._segments: tuple[IntArray, IntArray, IntArray] | None = None

    def __len__(self) -> int:
        return int((self._rowid[: self._n] >= 0).sum())

    @property
    def lock(self) -> threading.RLock:
        return self._mu

    def footprint_bytes(self) -> int:
        """RAM arrays plus the mapped vector pages searches leave resident: all of the
        combined file; the sentence file only when searches scan all of it (reranked
        searches release the candidates' sentence pages, see ``_reranked``)."""
        arrays = sum(a.nbytes for a in (self._rowid, self._created, self._trust,
                                        self._valid_to, self._episode, self._bw,
                                        self._cowner, self._slot_of))
        if self._neighbours is not None:
            arrays += sum(a.nbytes for a in self._neighbours)
        reranked = self.rerank and self._m > self.rerank
        mapped = self._n if reranked else self._n + self._m
        return int(arrays + mapped * (self.embedder.dim + 4))

    # -- IndexHook ----------------------------------------------------------------------

    def attach(self, conn: sqlite3.Connection) -> None:
        """Load slots and metadata; find what is pending (no vectors yet)."""
        with self._mu:
            tag = f"{self.embedder.model_id}+chunks{MAX_CHUNKS}+{_LAYOUT}"
            row = conn.execute("SELECT value FROM meta WHERE key='dense_model'").fetchone()
            token = conn.execute("SELECT value FROM meta WHERE key='dense_token'").fetchone()
            self._open_files()
            assert self.mat is not None and self.cmat is not None
            if row is None or row[0] != tag or token is None:
                token = (secrets.token_hex(8),)
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("DROP TABLE IF EXISTS vecs")
                conn.execute("DROP TABLE IF EXISTS wvecs")
                for stmt in _SCHEMA.split(";"):  # executescript() would commit
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute("INSERT OR REPLACE INTO meta VALUES('dense_model', ?)", (tag,))
                conn.execute("INSERT OR REPLACE INTO meta VALUES('dense_token', ?)", token)
                conn.execute("COMMIT")
                self.mat.drop()
                self.cmat.drop()
                self._token_path.write_text(token[0])
            conn.execute(_CEND_INDEX)
            self._load(conn)
            if self._file_token() != token[0]:
                self._rebuild_files(conn)
                self._token_path.write_text(token[0])
            self._queue = deque(int(r[0]) for r in conn.execute(
                "SELECT d.rowid FROM docs d LEFT JOIN vecs v ON v.rowid = d.rowid"
                " WHERE v.rowid IS NULL ORDER BY d.rowid"))
            self._wqueue = deque(int(r[0]) for r in conn.execute(
                "SELECT d.rowid FROM docs d LEFT JOIN wvecs w ON w.rowid = d.rowid"
                " WHERE d.kind = 'episode' AND (w.rowid IS NULL OR w.dirty) ORDER BY d.rowid"))
            self.pending = set(self._queue)
            self.wpending = set(self._wqueue)
            if self.pending or self.wpending:
                self.wake.set()

    @property
    def _token_path(self) -> Path:
        return self.index_dir / "dense.token"

    def _file_token(self) -> str | None:
        try:
            return self._token_path.read_text().strip()
        except FileNotFoundError:
            return None

    def _open_files(self) -> None:
        if self.mat is None or not self.mat.path.exists():
            self.index_dir.mkdir(parents=True, exist_ok=True)
            self.mat = VecFile(self.index_dir / "dense.i8", self.embedder.dim)
            self.cmat = VecFile(self.index_dir / "chunks.i8", self.embedder.dim)

    def _load(self, conn: sqlite3.Connection) -> None:
        slots, cslots = next_dense_slots(conn)
        max_rowid = conn.execute("SELECT coalesce(max(rowid), 0) FROM vecs").fetchone()[0]
        self._reset(int(slots), int(cslots))
        self._slot_of = np.full(int(max_rowid) + 1, -1, dtype=np.int64)
        for r in conn.execute(
                "SELECT v.rowid, v.slot, v.cstart, v.ccount, d.created, d.trust, d.valid_to,"
                " d.kind, length(w.vec) FROM vecs v JOIN docs d ON d.rowid = v.rowid"
                " LEFT JOIN wvecs w ON w.rowid = v.rowid"):
            self._place(int(r[0]), int(r[1]), int(r[2]), int(r[3]), float(r[4]),
                        float(r[5]), _INF if r[6] is None else float(r[6]), r[7] == "episode",
                        bool(r[8]))

    def _place(self, rowid: int, slot: int, cstart: int, ccount: int, created: float,
               trust: float, valid_to: float, episode: bool, window: bool) -> None:
        """Record in RAM that ``rowid`` lives in ``slot`` (arrays grow as needed)."""
        if slot >= len(self._rowid):
            self._grow(slot + 1, self._m)
        if cstart + ccount > len(self._cowner):
            self._grow(len(self._rowid), cstart + ccount)
        self._slot_of = grown(self._slot_of, rowid + 1, -1)
        self._n = max(self._n, slot + 1)
        self._m = max(self._m, cstart + ccount)
        self._rowid[slot] = rowid
        self._slot_of[rowid] = slot
        self._created[slot] = created
        self._trust[slot] = trust
        self._valid_to[slot] = valid_to
        self._episode[slot] = episode
        self._cowner[cstart : cstart + ccount] = slot
        self._bw[slot] = self.weights(ccount > 0, window)[2]
        self._neighbours = None
        self._segments = None

    def _grow(self, slots: int, cslots: int) -> None:
        self._rowid = grown(self._rowid, slots, -1)
        self._created = grown(self._created, slots, 0.0)
        self._trust = grown(self._trust, slots, 0.0)
        self._valid_to = grown(self._valid_to, slots, _INF)
        self._episode = grown(self._episode, slots, False)
        self._bw = grown(self._bw, slots, 0.0)
        self._cowner = grown(self._cowner, cslots, -1)

    def weights(self, chunks: bool, window: bool) -> tuple[float, float, float]:
        """(whole, window, best sentence) weights of the combined score."""
        ww = self.window_weight if window else 0.0
        if chunks:
            return 0.5 / (1 + ww), ww / (1 + ww), 0.5 / (1 + ww)
        return 1 / (1 + ww), ww / (1 + ww), 0.0

    def combine(self, whole: Vectors, window: Vectors | None, chunks: bool) -> Vectors:
        a, b, _ = self.weights(chunks, window is not None)
        out: Vectors = (a * whole if window is None else a * whole + b * window
                        ).astype(np.float32)
        return out

    def _rebuild_files(self, conn: sqlite3.Connection) -> None:
        """Rewrite the int8 files from the float vectors in the catalog."""
        assert self.mat is not None and self.cmat is not None
        log.info("rebuilding the int8 vector files of %s", self.index_dir)
        dim = self.embedder.dim
        for slot, cstart, ccount, blob, wblob in conn.execute(
                "SELECT v.slot, v.cstart, v.ccount, v.vec, w.vec FROM vecs v"
                " LEFT JOIN wvecs w ON w.rowid = v.rowid"):
            block = from_f16(blob, dim)
            window = from_f16(wblob, dim)[0] if wblob else None
            self.mat.put(int(slot), self.combine(block[0], window, ccount > 0)[None, :])
            self.cmat.put(int(cstart), block[1:])
        self.mat.flush()
        self.cmat.flush()

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        """Inside the catalog's transaction: drop vectors of deleted or changed records
        and queue them (and the windows around them) for the filler. No embedding here:
        this runs on the write path."""
        with self._mu:
            affected: set[int] = set()
            for rowid in [*deletes, *(r for r, _ in upserts)]:
                slot = self.slot(rowid)
                if slot >= 0 and self._episode[slot]:
                    affected.update(adjacent(conn, float(self._created[slot]), rowid,
                                             self.session_gap))
            for rowid in deletes:
                conn.execute("DELETE FROM vecs WHERE rowid=?", (rowid,))
                conn.execute("DELETE FROM wvecs WHERE rowid=?", (rowid,))
                self._kill(rowid)
                self.pending.discard(rowid)
                self.wpending.discard(rowid)
            for rowid, rec in upserts:
                old = conn.execute("SELECT h FROM vecs WHERE rowid=?", (rowid,)).fetchone()
                if old is not None and old[0] == digest(record_texts(rec)):
                    self._touch(rowid, rec)  # only front matter changed: keep the vectors
                else:
                    conn.execute("DELETE FROM vecs WHERE rowid=?", (rowid,))
                    self._kill(rowid)
                    self.requeue([rowid])
                affected.add(rowid)  # its window changed, or (no longer an episode) goes
                if rec.kind == "episode":
                    affected.update(adjacent(conn, rec.created.timestamp(), rowid,
                                             self.session_gap))
            affected.difference_update(deletes)
            for rowid in affected:
                conn.execute("UPDATE wvecs SET dirty=1 WHERE rowid=?", (rowid,))
                self.mark_window(rowid)
            if self.pending or self.wpending:
                self.wake.set()

    def committed(self) -> None:
        return None

    def rolled_back(self, conn: sqlite3.Connection) -> None:
        with self._mu:
            self._load(conn)

    # -- work for the filler --------------------------------------------------------

    def take_pending(self, n: int) -> list[int]:
        """Up to ``n`` pending rowids, oldest first; they stay pending (and found by
        text) until :meth:`embedded` says their vectors committed."""
        out: list[int] = []
        seen: set[int] = set()
        if not self._queue and self.pending:  # e.g. after a failed batch
            self._queue.extend(sorted(self.pending))
        while self._queue and len(out) < n:
            r = self._queue.popleft()
            if r in self.pending and r not in seen:
                out.append(r)
                seen.add(r)
        return out

    def embedded(self, rowids: Sequence[int]) -> None:
        self.pending.difference_update(rowids)

    def requeue(self, rowids: Sequence[int]) -> None:
        self.pending.update(rowids)
        self._queue.extend(rowids)

    def mark_window(self, *rowids: int) -> None:
        self.wpending.update(rowids)
        self._wqueue.extend(rowids)

    def take_windows(self, n: int) -> list[int]:
        out: list[int] = []
        while self._wqueue and len(out) < n:
            r = self._wqueue.popleft()
            if r in self.wpending:
                self.wpending.discard(r)
                out.append(r)
        return out

    # -- slots ------------------------------------------------------------------------

    def _kill(self, rowid: int) -> None:
        slot = self.slot(rowid)
        if slot < 0:
            return
        self._slot_of[rowid] = -1
        self._rowid[slot] = -1
        self._episode[slot] = False
        owners = self._cowner[: self._m]
        owners[owners == slot] = -1
        self._neighbours = None
        self._segments = None

    def _touch(self, rowid: int, rec: MemoryRecord) -> None:
        slot = self.slot(rowid)
        if slot < 0:
            return
        self._created[slot] = rec.created.timestamp()
        self._trust[slot] = rec.trust
        self._valid_to[slot] = rec.valid_to.timestamp() if rec.valid_to else _INF
        self._episode[slot] = rec.kind == "episode"
        self._neighbours = None

    def set_best_weight(self, slot: int, chunks: bool, window: bool) -> None:
        self._bw[slot] = self.weights(chunks, window)[2]

    def close(self) -> None:
        with self._mu:
            for f in (self.mat, self.cmat):
                if f is not None:
                    f.flush()
                    f.close()
            self.mat = self.cmat = None

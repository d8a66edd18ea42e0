"""Dense vector index: float32 matrices in RAM, persisted as blobs in the catalog DB.

Each record gets one vector for its whole text and, when it has several sentences, one
per sentence (up to ``MAX_CHUNKS``): a long chat turn mixes topics, and a question
usually matches one sentence of it. A record's similarity to a query is the mean of its
whole-text cosine and its best sentence cosine. Episodes are then smoothed with their
neighbours in time (``score += smooth * mean(prev, next)``), because a turn is often
only understandable with the turns around it ("Yes! Last Saturday." answers the
previous turn's question).

Episodes also get a *window* vector: the turn embedded together with the episodes right
before and after it in the same session (neighbours in time at most ``SESSION_GAP``
apart), so the model reads a turn in its context instead of only averaging scores
afterwards. An episode's base score is ``(s + WINDOW_WEIGHT * window) / (1 +
WINDOW_WEIGHT)``; records without a window use their own score for it. Writing an
episode re-embeds the windows of its (at most two) neighbours, whose context changed.
On LoCoMo this lifted dense recall on the held-out conversations (bench/README.md).

Search is brute force over L2-normalized rows: exact, and fast enough here (100k x 384
is ~150 MB; one matrix-vector product takes a few ms). Vectors live in table ``vecs``
of ``.index/catalog.sqlite3`` so they share the catalog's transactions: the index can
never hold a vector for a record it does not know, and deleting ``.index/`` drops both.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memory_store.catalog import Progress, record_from_json
from memory_store.embed import Embedder, Vectors
from memory_store.protocol import MemoryRecord

log = logging.getLogger(__name__)

_SCHEMA = ("CREATE TABLE IF NOT EXISTS vecs(rowid INTEGER PRIMARY KEY, vec BLOB NOT NULL,"
           " h TEXT NOT NULL DEFAULT '')")
# Window vectors; an empty blob records "computed, no neighbour in the session".
_WSCHEMA = ("CREATE TABLE IF NOT EXISTS wvecs(rowid INTEGER PRIMARY KEY, vec BLOB NOT NULL,"
            " h TEXT NOT NULL)")
#: Bump when the stored layout or what gets embedded changes: vectors are rebuilt.
_LAYOUT = "v2"
_INF = math.inf
MAX_CHUNKS = 8
#: Weight of the mean neighbour score added to an episode's score.
DEFAULT_SMOOTH = 0.5
#: Weight of an episode's window vector score against its own score.
WINDOW_WEIGHT = 0.5
#: Episodes further apart in time than this (seconds) are in different sessions: no
#: shared window, no smoothing across. Any value between minutes and days gives the same
#: LoCoMo sessions; one hour is a guess at what separates chat sessions.
SESSION_GAP = 3600.0
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_LABEL = re.compile(r"^([^\n:.!?]{1,40}):\s")
IntArray = npt.NDArray[np.int64]


def dense_text(record: MemoryRecord) -> str:
    """What the whole-record vector embeds: the body, plus speaker/entity when absent."""
    extra = [v for k in ("speaker", "entity", "title")
             if isinstance(v := record.metadata.get(k), str) and v not in record.content]
    return " ".join([record.content, *extra]) if extra else record.content


def sentence_chunks(text: str) -> list[str]:
    """The sentences of ``text`` (each keeping a leading "Speaker: " label), or [] when
    there is only one."""
    label_m = _LABEL.match(text)
    label = label_m.group(0) if label_m else ""
    body = text[len(label):]
    parts = [p.strip() for p in _SENTENCE.split(body) if p.strip()]
    if len(parts) < 2:
        return []
    return [label + p for p in parts[:MAX_CHUNKS]]


@dataclass(frozen=True)
class DenseView:
    """Arrays by position, as of one moment (see :meth:`DenseIndex.snapshot`)."""

    rowids: IntArray
    created: npt.NDArray[np.float64]
    trust: npt.NDArray[np.float64]
    pos: dict[int, int]
    prev: IntArray
    next: IntArray


class DenseIndex:
    """An :class:`~memory_store.catalog.IndexHook` holding the vectors of every record."""

    def __init__(self, embedder: Embedder, *, smooth: float = DEFAULT_SMOOTH,
                 window_weight: float = WINDOW_WEIGHT,
                 session_gap: float = SESSION_GAP) -> None:
        self.embedder = embedder
        self.smooth = smooth
        self.window_weight = window_weight
        self.session_gap = session_gap
        self._mu = threading.RLock()
        self._reset(0, 0)

    def _reset(self, capacity: int, chunk_capacity: int) -> None:
        cap = max(capacity, 64)
        ccap = max(chunk_capacity, 64)
        dim = self.embedder.dim
        self._n = 0
        self._rowids = np.zeros(cap, dtype=np.int64)
        self._mat = np.zeros((cap, dim), dtype=np.float32)
        self._created = np.zeros(cap, dtype=np.float64)
        self._trust = np.zeros(cap, dtype=np.float64)
        self._valid_to = np.full(cap, _INF, dtype=np.float64)
        self._episode = np.zeros(cap, dtype=bool)
        self._wmat = np.zeros((cap, dim), dtype=np.float32)
        self._whas = np.zeros(cap, dtype=bool)
        self._whash: dict[int, str] = {}
        self._pos: dict[int, int] = {}
        # Sentence vectors: owner is the position of the record in the arrays above.
        self._m = 0
        self._cmat = np.zeros((ccap, dim), dtype=np.float32)
        self._cowner = np.zeros(ccap, dtype=np.int64)
        self._calive = np.zeros(ccap, dtype=bool)
        self._chunks_of: dict[int, list[int]] = {}
        self._dead = 0
        self._neighbours: tuple[IntArray, IntArray] | None = None
        self._hash: dict[int, str] = {}  # rowid -> digest of the embedded texts

    def __len__(self) -> int:
        return self._n

    # -- IndexHook ----------------------------------------------------------------------

    def attach(self, conn: sqlite3.Connection) -> None:
        """Load every vector; embed records that have none (new dir, other backend, other
        model), replacing all vectors when the model changed."""
        with self._mu:
            row = conn.execute("SELECT value FROM meta WHERE key='dense_model'").fetchone()
            tag = f"{self.embedder.model_id}+chunks{MAX_CHUNKS}+{_LAYOUT}"
            if row is None or row[0] != tag:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("DROP TABLE IF EXISTS vecs")
                conn.execute("DROP TABLE IF EXISTS wvecs")
                conn.execute(_SCHEMA)
                conn.execute("INSERT OR REPLACE INTO meta VALUES('dense_model', ?)", (tag,))
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
            conn.execute(_WSCHEMA)
            self._load(conn)
            no_window = [int(r[0]) for r in conn.execute(
                "SELECT d.rowid FROM docs d LEFT JOIN wvecs w ON w.rowid = d.rowid"
                " WHERE w.rowid IS NULL AND d.kind = 'episode'")]
            if no_window:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._sync_windows(conn, no_window)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise

    def _load(self, conn: sqlite3.Connection) -> None:
        dim = self.embedder.dim
        n, total = conn.execute("SELECT count(*), coalesce(sum(length(vec)), 0) FROM vecs"
                                ).fetchone()
        # Stream rows into preallocated arrays: fetching all blobs first would double
        # the peak memory at 100k records.
        self._reset(int(n) + 64, int(total) // (4 * dim) - int(n) + 64)
        for r in conn.execute(
                "SELECT v.rowid, v.vec, d.created, d.trust, d.valid_to, d.kind, v.h FROM vecs v"
                " JOIN docs d ON d.rowid = v.rowid"):
            block = np.frombuffer(r[1], dtype=np.float32).reshape(-1, dim)
            self._put_raw(int(r[0]), block, float(r[2]), float(r[3]),
                          _INF if r[4] is None else float(r[4]), r[5] == "episode")
            self._hash[int(r[0])] = str(r[6])
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name='wvecs'").fetchone() is None:
            return
        for rowid, blob, h in conn.execute("SELECT rowid, vec, h FROM wvecs"):
            i = self._pos.get(int(rowid))
            if i is None:
                continue
            self._whash[int(rowid)] = str(h)
            if blob:
                self._wmat[i] = np.frombuffer(blob, dtype=np.float32)
                self._whas[i] = True

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        with self._mu:
            # Windows to recompute: the old neighbours of deleted or moved records (their
            # docs rows are already gone or changed, so look around the old time) ...
            affected: set[int] = set()
            for rowid in [*deletes, *(r for r, _ in upserts)]:
                i = self._pos.get(rowid)
                if i is not None and self._episode[i]:
                    affected.update(self._adjacent(conn, float(self._created[i]), rowid))
            for rowid in deletes:
                conn.execute("DELETE FROM vecs WHERE rowid=?", (rowid,))
                conn.execute("DELETE FROM wvecs WHERE rowid=?", (rowid,))
                self._remove(rowid)
            if upserts:
                self._store(conn, list(upserts), progress)
            # ... and every written episode with its new neighbours.
            for rowid, rec in upserts:
                if rec.kind == "episode":
                    affected.add(rowid)
                    affected.update(self._adjacent(conn, rec.created.timestamp(), rowid))
                elif rowid in self._whash:
                    affected.add(rowid)
            affected.difference_update(deletes)
            if affected:
                self._sync_windows(conn, sorted(affected))

    def committed(self) -> None:
        return None

    def rolled_back(self, conn: sqlite3.Connection) -> None:
        with self._mu:
            self._load(conn)

    # -- internals --------------------------------------------------------------------

    def _store(self, conn: sqlite3.Connection, items: list[tuple[int, MemoryRecord]],
               progress: Progress | None) -> None:
        step = 128
        for start in range(0, len(items), step):
            chunk = items[start : start + step]
            texts: list[str] = []
            todo: list[tuple[int, MemoryRecord, str, int, int]] = []
            for rowid, rec in chunk:
                parts = [dense_text(rec), *sentence_chunks(rec.content)]
                digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()
                if rowid in self._pos and self._hash.get(rowid) == digest:
                    # Only front matter changed (trust, valid_to...): keep the vectors.
                    self._touch(rowid, rec)
                    continue
                todo.append((rowid, rec, digest, len(texts), len(texts) + len(parts)))
                texts.extend(parts)
            vecs = self.embedder.embed(texts)
            rows = []
            for rowid, rec, digest, a, b in todo:
                block = np.ascontiguousarray(vecs[a:b], dtype=np.float32)
                rows.append((rowid, block.tobytes(), digest))
                self._put_raw(rowid, block, rec.created.timestamp(), rec.trust,
                              rec.valid_to.timestamp() if rec.valid_to else _INF,
                              rec.kind == "episode")
                self._hash[rowid] = digest
            conn.executemany("INSERT OR REPLACE INTO vecs(rowid, vec, h) VALUES(?, ?, ?)",
                             rows)
            if progress is not None:
                progress(start + len(chunk), len(items))

    def _adjacent(self, conn: sqlite3.Connection, created: float, rowid: int) -> list[int]:
        """Rowids of the episodes right before and after (created, rowid) in the same
        session, the one before first."""
        out = []
        for sql in ("SELECT rowid, created FROM docs WHERE kind='episode' AND rowid != ?"
                    " AND (created, rowid) < (?, ?) ORDER BY created DESC, rowid DESC LIMIT 1",
                    "SELECT rowid, created FROM docs WHERE kind='episode' AND rowid != ?"
                    " AND (created, rowid) > (?, ?) ORDER BY created, rowid LIMIT 1"):
            row = conn.execute(sql, (rowid, created, rowid)).fetchone()
            if row is not None and abs(float(row[1]) - created) <= self.session_gap:
                out.append(int(row[0]))
        return out

    def _window_text(self, conn: sqlite3.Connection, rowid: int) -> str | None:
        """The episode with its session neighbours, in time order (None: no neighbour or
        not an episode)."""
        row = conn.execute("SELECT created, kind, record FROM docs WHERE rowid=?",
                           (rowid,)).fetchone()
        if row is None or row[1] != "episode":
            return None
        created = float(row[0])
        near = self._adjacent(conn, created, rowid)
        if not near:
            return None
        parts: list[tuple[float, int, str]] = [(created, rowid, record_from_json(row[2]).content)]
        for r in near:
            j = conn.execute("SELECT created, record FROM docs WHERE rowid=?", (r,)).fetchone()
            parts.append((float(j[0]), r, record_from_json(j[1]).content))
        return " ".join(text for _, _, text in sorted(parts))

    def _sync_windows(self, conn: sqlite3.Connection, rowids: Sequence[int]) -> None:
        """Bring the window vectors of ``rowids`` up to date (embedding only changed
        windows)."""
        step = 128
        for start in range(0, len(rowids), step):
            todo: list[tuple[int, str]] = []
            for rowid in rowids[start : start + step]:
                if rowid not in self._pos:
                    continue
                text = self._window_text(conn, rowid)
                digest = ("" if text is None else
                          hashlib.blake2b(text.encode(), digest_size=16).hexdigest())
                if self._whash.get(rowid) == digest:
                    continue
                if text is None:
                    self._set_window(rowid, None, digest)
                    conn.execute("INSERT OR REPLACE INTO wvecs(rowid, vec, h) VALUES(?, ?, ?)",
                                 (rowid, b"", digest))
                else:
                    todo.append((rowid, text))
            if not todo:
                continue
            vecs = self.embedder.embed([t for _, t in todo])
            rows = []
            for (rowid, text), vec in zip(todo, vecs, strict=True):
                digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
                v = np.ascontiguousarray(vec, dtype=np.float32)
                self._set_window(rowid, v, digest)
                rows.append((rowid, v.tobytes(), digest))
            conn.executemany("INSERT OR REPLACE INTO wvecs(rowid, vec, h) VALUES(?, ?, ?)",
                             rows)

    def _set_window(self, rowid: int, vec: Vectors | None, digest: str) -> None:
        i = self._pos[rowid]
        self._whash[rowid] = digest
        self._whas[i] = vec is not None
        if vec is not None:
            self._wmat[i] = vec

    def _touch(self, rowid: int, rec: MemoryRecord) -> None:
        i = self._pos[rowid]
        self._created[i] = rec.created.timestamp()
        self._trust[i] = rec.trust
        self._valid_to[i] = rec.valid_to.timestamp() if rec.valid_to else _INF
        self._episode[i] = rec.kind == "episode"
        self._neighbours = None

    def _put_raw(self, rowid: int, block: Vectors, created: float, trust: float,
                 valid_to: float, episode: bool) -> None:
        i = self._pos.get(rowid)
        if i is None:
            if self._n == len(self._rowids):
                self._grow()
            i = self._n
            self._n += 1
            self._pos[rowid] = i
            self._rowids[i] = rowid
        else:
            self._kill_chunks(rowid)
        self._mat[i] = block[0]
        self._created[i] = created
        self._trust[i] = trust
        self._valid_to[i] = valid_to
        self._episode[i] = episode
        extra = block[1:]
        if len(extra):
            while self._m + len(extra) > len(self._cowner):
                self._grow_chunks()
            j = self._m
            self._cmat[j : j + len(extra)] = extra
            self._cowner[j : j + len(extra)] = i
            self._calive[j : j + len(extra)] = True
            self._chunks_of[rowid] = list(range(j, j + len(extra)))
            self._m += len(extra)
        self._neighbours = None

    def _kill_chunks(self, rowid: int) -> None:
        idx = self._chunks_of.pop(rowid, None)
        if idx:
            self._calive[idx] = False
            self._dead += len(idx)

    def _grow(self) -> None:
        cap = len(self._rowids) * 2
        mat = np.zeros((cap, self.embedder.dim), dtype=np.float32)
        mat[: self._n] = self._mat[: self._n]
        self._mat = mat
        wmat = np.zeros((cap, self.embedder.dim), dtype=np.float32)
        wmat[: self._n] = self._wmat[: self._n]
        self._wmat = wmat
        whas = np.zeros(cap, dtype=bool)
        whas[: self._n] = self._whas[: self._n]
        self._whas = whas
        self._rowids = np.resize(self._rowids, cap)
        self._created = np.resize(self._created, cap)
        self._trust = np.resize(self._trust, cap)
        self._valid_to = np.resize(self._valid_to, cap)
        self._episode = np.resize(self._episode, cap)

    def _grow_chunks(self) -> None:
        if self._dead > self._m // 2:
            self._compact_chunks()
            if self._m < len(self._cowner) * 3 // 4:
                return
        cap = len(self._cowner) * 2
        cmat = np.zeros((cap, self.embedder.dim), dtype=np.float32)
        cmat[: self._m] = self._cmat[: self._m]
        self._cmat = cmat
        self._cowner = np.resize(self._cowner, cap)
        alive = np.zeros(cap, dtype=bool)
        alive[: self._m] = self._calive[: self._m]
        self._calive = alive

    def _compact_chunks(self) -> None:
        keep = np.flatnonzero(self._calive[: self._m])
        remap = {int(old): new for new, old in enumerate(keep)}
        m = len(keep)
        self._cmat[:m] = self._cmat[keep]
        self._cowner[:m] = self._cowner[keep]
        self._calive[:m] = True
        self._calive[m:] = False
        self._chunks_of = {r: [remap[j] for j in idx] for r, idx in self._chunks_of.items()}
        self._m = m
        self._dead = 0

    def _remove(self, rowid: int) -> None:
        i = self._pos.pop(rowid, None)
        self._hash.pop(rowid, None)
        self._whash.pop(rowid, None)
        if i is None:
            return
        self._kill_chunks(rowid)
        last = self._n - 1
        if i != last:
            moved = int(self._rowids[last])
            for arr in (self._rowids, self._mat, self._created, self._trust, self._valid_to,
                        self._episode, self._wmat, self._whas):
                arr[i] = arr[last]
            self._pos[moved] = i
            idx = self._chunks_of.get(moved)
            if idx:
                self._cowner[idx] = i
        self._whas[last] = False
        self._n = last
        self._neighbours = None

    def _neighbour_positions(self) -> tuple[IntArray, IntArray]:
        """prev/next position of each episode in (created, rowid) order, within its
        session; self elsewhere."""
        if self._neighbours is None:
            n = self._n
            prev = np.arange(n, dtype=np.int64)
            nxt = np.arange(n, dtype=np.int64)
            eps = np.flatnonzero(self._episode[:n])
            if len(eps) > 1:
                order = eps[np.lexsort((self._rowids[eps], self._created[eps]))]
                close = np.diff(self._created[order]) <= self.session_gap
                prev[order[1:][close]] = order[:-1][close]
                nxt[order[:-1][close]] = order[1:][close]
            self._neighbours = (prev, nxt)
        return self._neighbours

    # -- queries ----------------------------------------------------------------------

    def scores(self, query_vec: Vectors) -> npt.NDArray[np.float32]:
        """Similarity of every held record to the query, by position."""
        n, m = self._n, self._m
        q = query_vec.reshape(-1)
        s = self._mat[:n] @ q
        if m:
            cs = self._cmat[:m] @ q
            alive = self._calive[:m]
            best = np.full(n, -np.inf, dtype=np.float32)
            np.maximum.at(best, self._cowner[:m][alive], cs[alive])
            s = np.where(np.isfinite(best), (s + best) / 2, s).astype(np.float32)
        if self.window_weight:
            has = self._whas[:n]
            if has.any():
                ws = np.where(has, self._wmat[:n] @ q, s)
                s = ((s + self.window_weight * ws) / (1 + self.window_weight)
                     ).astype(np.float32)
        if self.smooth and n > 1:
            prev, nxt = self._neighbour_positions()
            s = s + self.smooth * (s[prev] + s[nxt]) / 2
        return s

    def masked_scores(self, query_vec: Vectors, *, now: float,
                      allowed: Sequence[int] | None = None,
                      include_superseded: bool = False) -> npt.NDArray[np.float32]:
        """:meth:`scores` with -inf for rows the filters exclude (caller holds no lock;
        positions are only stable until the next write, so use :meth:`snapshot`)."""
        n = self._n
        scores = self.scores(query_vec)
        mask: npt.NDArray[np.bool_] | None = None
        if not include_superseded:
            mask = self._valid_to[:n] > now
        if allowed is not None:
            allow = np.isin(self._rowids[:n], np.fromiter(allowed, dtype=np.int64))
            mask = allow if mask is None else (mask & allow)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf).astype(np.float32)
        return scores

    def snapshot(self) -> DenseView:
        """A consistent view for array-level fusion (hold ``lock`` while using it)."""
        n = self._n
        prev, nxt = self._neighbour_positions()
        return DenseView(rowids=self._rowids[:n], created=self._created[:n],
                         trust=self._trust[:n], pos=self._pos, prev=prev, next=nxt)

    @property
    def lock(self) -> threading.RLock:
        return self._mu

    def search(self, query_vec: Vectors, k: int, *, now: float,
               allowed: Sequence[int] | None = None,
               include_superseded: bool = False) -> list[tuple[int, float]]:
        """Top ``k`` (rowid, similarity) among live rows (``valid_to`` after ``now`` unless
        ``include_superseded``), restricted to ``allowed`` rowids when given."""
        with self._mu:
            n = self._n
            if n == 0 or k <= 0:
                return []
            scores = self.masked_scores(query_vec, now=now, allowed=allowed,
                                        include_superseded=include_superseded)
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

"""Read side of the dense index: scoring every slot, top-k, the view hybrid fuses over.

:class:`DenseQueries` is mixed into :class:`memory_store.index._dense.DenseIndex`, which owns
the arrays and keeps them in step with the catalog; everything here only reads them
(callers hold ``lock``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memory_store.index._embed import Vectors
from memory_store.index._vecfile import VecFile

IntArray = npt.NDArray[np.int64]


def top_k(scores: npt.NDArray[np.floating], k: int) -> IntArray:
    """Indices of the ``k`` best ``scores``, best first (equal scores in index order)."""
    kk = min(k, len(scores))
    if kk <= 0:
        return np.zeros(0, dtype=np.int64)
    top = np.argpartition(-scores, kk - 1)[:kk]
    return top[np.argsort(-scores[top], kind="stable")]


@dataclass(frozen=True)
class DenseView:
    """Arrays by slot, as of one moment (see :meth:`DenseIndex.snapshot`)."""

    rowids: IntArray
    created: npt.NDArray[np.float64]
    trust: npt.NDArray[np.float64]
    slot_of: IntArray
    prev: IntArray
    next: IntArray

    def slots(self, rowids: Sequence[int] | IntArray) -> IntArray:
        """Slot of each rowid, -1 where it has none (pending or unknown)."""
        r = np.asarray(rowids, dtype=np.int64)
        out = np.full(len(r), -1, dtype=np.int64)
        ok = (r >= 0) & (r < len(self.slot_of))
        out[ok] = self.slot_of[r[ok]]
        return out


class DenseQueries:
    """Scoring over the slot arrays of :class:`~memory_store.index._dense.DenseIndex`."""

    _mu: threading.RLock
    _n: int
    _m: int
    _rowid: IntArray
    _created: npt.NDArray[np.float64]
    _trust: npt.NDArray[np.float64]
    _valid_to: npt.NDArray[np.float64]
    _episode: npt.NDArray[np.bool_]
    _bw: npt.NDArray[np.float32]
    _cowner: IntArray
    _slot_of: IntArray
    _neighbours: tuple[IntArray, IntArray] | None
    _segments: tuple[IntArray, IntArray, IntArray] | None
    mat: VecFile | None
    cmat: VecFile | None
    smooth: float
    session_gap: float
    rerank: int

    def slot(self, rowid: int) -> int:
        if 0 <= rowid < len(self._slot_of):
            return int(self._slot_of[rowid])
        return -1

    def _neighbour_positions(self) -> tuple[IntArray, IntArray]:
        """prev/next slot of each live episode in (created, rowid) order, within its
        session; self elsewhere."""
        if self._neighbours is None:
            n = self._n
            prev = np.arange(n, dtype=np.int64)
            nxt = np.arange(n, dtype=np.int64)
            eps = np.flatnonzero(self._episode[:n] & (self._rowid[:n] >= 0))
            if len(eps) > 1:
                order = eps[np.lexsort((self._rowid[eps], self._created[eps]))]
                close = np.diff(self._created[order]) <= self.session_gap
                prev[order[1:][close]] = order[:-1][close]
                nxt[order[:-1][close]] = order[1:][close]
            self._neighbours = (prev, nxt)
        return self._neighbours

    def _chunk_segments(self) -> tuple[IntArray, IntArray, IntArray]:
        """(first chunk slot, owner slot, length) of each run of live chunks with one
        owner (a record's sentences are one run)."""
        if self._segments is None:
            owner = self._cowner[: self._m]
            live = np.flatnonzero(owner >= 0)
            first = np.flatnonzero(np.r_[True, (np.diff(live) != 1)
                                         | (np.diff(owner[live]) != 0)]) if len(live) \
                else live
            starts = live[first]
            counts = np.diff(np.r_[first, len(live)]).astype(np.int64)
            self._segments = (starts, owner[starts], counts)
        return self._segments

    # -- queries ----------------------------------------------------------------------

    def scores(self, query_vec: Vectors,
               mask: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.float32]:
        """Similarity of every slot to the query (dead slots: garbage, mask them).

        With ``rerank`` set and more records with sentences than that, only the
        ``rerank`` best of them by an estimate (among ``mask``) get their sentences
        scored; see :meth:`_reranked`."""
        assert self.mat is not None and self.cmat is not None
        n, m = self._n, self._m
        q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        s = self.mat.dot(q, n)
        if m:
            starts, owners, counts = self._chunk_segments()
            if self.rerank and len(starts) > self.rerank:
                s = self._reranked(q, s, (starts, owners, counts), mask)
            elif len(starts):
                cs = self.cmat.dot(q, m)
                cs[self._cowner[:m] < 0] = -np.inf
                best = np.maximum.reduceat(cs, starts)
                s[owners] += self._bw[owners] * best
        if self.smooth and n > 1:
            prev, nxt = self._neighbour_positions()
            s = (s + np.float32(self.smooth) * (s[prev] + s[nxt]) / 2).astype(np.float32)
        return s

    def _reranked(self, q: npt.NDArray[np.float32], s: npt.NDArray[np.float32],
                  segments: tuple[IntArray, IntArray, IntArray],
                  mask: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.float32]:
        """Scores with the best sentence computed for the ``rerank`` best candidates only.

        A record's combined vector carries weight ``1 - bw`` (whole and window), its
        best sentence ``bw``; the estimate takes the best sentence to score like the
        combined vector (``s / (1 - bw)``). Candidates are the best by estimate; they
        get the exact score, every other record keeps its estimate (so a search maps
        the sentence pages of the candidates only)."""
        assert self.cmat is not None
        starts, owners, counts = segments
        bw = self._bw[: self._n]
        est = (s / (1 - bw)).astype(np.float32)
        pick = est[owners]
        if mask is not None:
            pick = np.where(mask[owners], pick, -np.inf)
        top = np.argpartition(-pick, self.rerank - 1)[: self.rerank]
        top = np.sort(top)  # file order: neighbouring rows share pages
        cnt = counts[top]
        offs = np.cumsum(cnt) - cnt
        # read, not mapped (VecFile.dot_runs): the combined file and an exact sentence
        # scan read every page on every search and stay mapped; the candidates differ
        # from search to search and would add up to the whole file in the resident set
        best = np.maximum.reduceat(self.cmat.dot_runs(q, starts[top], cnt), offs)
        own = owners[top]
        est[own] = s[own] + bw[own] * best
        return est

    def masked_scores(self, query_vec: Vectors, *, now: float,
                      allowed: Sequence[int] | None = None,
                      include_superseded: bool = False) -> npt.NDArray[np.float32]:
        """:meth:`scores` with -inf for dead slots and rows the filters exclude (hold
        ``lock``; slots are only stable until the next write)."""
        n = self._n
        mask = self._rowid[:n] >= 0
        if not include_superseded:
            mask &= self._valid_to[:n] > now
        if allowed is not None:
            mask &= np.isin(self._rowid[:n], np.fromiter(allowed, dtype=np.int64))
        scores = self.scores(query_vec, mask)
        return np.where(mask, scores, -np.inf).astype(np.float32)

    def snapshot(self) -> DenseView:
        """A consistent view for array-level fusion (hold ``lock`` while using it)."""
        n = self._n
        prev, nxt = self._neighbour_positions()
        return DenseView(rowids=self._rowid[:n], created=self._created[:n],
                         trust=self._trust[:n], slot_of=self._slot_of, prev=prev, next=nxt)

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
            return [(int(self._rowid[i]), float(scores[i])) for i in top_k(scores, k)
                    if scores[i] != -np.inf]

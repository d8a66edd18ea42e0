"""``hybrid`` backend: BM25 and dense scores fused, plus recency and trust."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from memory_store.backends.vector import VectorMemory
from memory_store.files._group import GroupDirectory
from memory_store.index._dense_query import top_k
from memory_store.index._embed import Embedder
from memory_store.ranking._asking import AskIndex
from memory_store.ranking._filters import SearchFilters
from memory_store.ranking._people import PeopleIndex, named_in, without_names

DAY = 86_400.0
_pools: dict[int, ThreadPoolExecutor] = {}


def _embed_pool() -> ThreadPoolExecutor:
    """A per-process executor: one inherited through fork() has no live threads and
    would never run what is submitted to it."""
    pid = os.getpid()
    pool = _pools.get(pid)
    if pool is None:
        pool = _pools[pid] = ThreadPoolExecutor(max_workers=2,
                                                thread_name_prefix="memory-embed")
    return pool
Floats = npt.NDArray[np.float64]


def _minmax(values: Floats) -> Floats:
    lo, hi = float(values.min()), float(values.max())
    if hi - lo <= 0:
        return np.ones_like(values)
    return (values - lo) / (hi - lo)


class HybridMemory(VectorMemory):
    """Convex combination of BM25 and dense scores, then small recency and trust priors.

    Names of the group's people (:mod:`memory_store.ranking._people`) go to neither retriever:
    when the query names people, the records of all of them (spoken in, or facts about
    them) get ``speaker_weight`` instead. Each retriever contributes
    its top ``pool`` records with min-max normalized scores (0 outside its pool). Like
    the dense scores, the lexical ones are smoothed over neighbouring episodes
    (``lexical_smooth``), so the turn right after a strong keyword hit (often the
    answer) becomes a candidate too. A record that ends by asking passes that share of
    its fused score to the next record of its session (:mod:`memory_store.ranking._asking`).
    Score fusion beat reciprocal rank fusion on LoCoMo (bench/README.md): RRF throws
    away how far ahead the top hit of one retriever is.
    """

    backend = "hybrid"

    def __init__(self, group: GroupDirectory, *, embedder: Embedder | None = None,
                 lexical_weight: float = 1.0, dense_weight: float = 1.0,
                 lexical_smooth: float = 0.5, recency_weight: float = 0.02,
                 trust_weight: float = 0.02, half_life_days: float = 90.0, pool: int = 200,
                 speaker_weight: float = 0.3, **options: Any) -> None:
        self.people = PeopleIndex()
        self.asks = AskIndex()
        super().__init__(group, embedder=embedder, hooks=[self.people, self.asks], **options)
        self.speaker_weight = speaker_weight
        self.lexical_weight = lexical_weight
        self.dense_weight = dense_weight
        self.lexical_smooth = lexical_smooth
        self.recency_weight = recency_weight
        self.trust_weight = trust_weight
        self.half_life_days = half_life_days
        self.pool = pool

    def _rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        pool = max(self.pool, 2 * k)
        # The query embedding (onnxruntime) and the BM25 query (SQLite) both release the
        # GIL: run them side by side.
        names = self.people.names
        words = without_names(query, names)
        embedding = _embed_pool().submit(self.dense.embedder.embed, [words])
        lexical = self.catalog.lexical(words, pool, filters)
        named = named_in(query, names)
        owned = self.people.records_of(named) if named and self.speaker_weight else None
        qvec = embedding.result()[0]
        allowed = None if filters.only_superseded_check else self.catalog.allowed(filters)
        now = filters.now.timestamp() if filters.now else 0.0
        with self.dense.lock:
            view = self.dense.snapshot()
            n = len(view.rowids)
            masked = (self.dense.masked_scores(qvec, now=now, allowed=allowed,
                                               include_superseded=filters.include_superseded)
                      if n else np.zeros(0, dtype=np.float32))
            live = np.isfinite(masked)
            dense = np.zeros(n)
            top = np.zeros(0, dtype=np.int64)
            if n:
                top = np.argpartition(-masked, min(pool, n) - 1)[: min(pool, n)]
                top = top[live[top]]
            if len(top):
                # The epsilon keeps the pool's weakest member distinguishable from
                # records outside every pool.
                dense[top] = _minmax(masked[top].astype(np.float64)) + 1e-6
            lex = np.zeros(n)
            norm = (_minmax(np.array([s for _, s in lexical])) + 1e-6 if lexical
                    else np.zeros(0))
            slots = view.slots([r for r, _ in lexical])
            has = slots >= 0
            if has.any():
                lex[slots[has]] = norm[has]
                if self.lexical_smooth:
                    lex = lex + self.lexical_smooth * (lex[view.prev] + lex[view.next]) / 2
                    lex /= lex.max()
            fused = self._defer_asks(self.lexical_weight * lex + self.dense_weight * dense,
                                     view.rowids, view.next)
            if owned is not None and len(owned):
                by = view.slots(owned)
                by = by[by >= 0]
                fused[by[fused[by] > 0]] += self.speaker_weight
            candidates = np.flatnonzero((fused > 0) & live)
            decay = math.log(2) / (self.half_life_days * DAY)
            age = np.maximum(0.0, now - view.created[candidates])
            score = (fused[candidates] + self.recency_weight * np.exp(-decay * age)
                     + self.trust_weight * view.trust[candidates])
            out = [(int(view.rowids[candidates[i]]), float(score[i]))
                   for i in top_k(score, k)]
            # Records not embedded yet take part through their text alone.
            waiting = [(r, float(x)) for (r, _), x, ok in zip(lexical, norm, has, strict=True)
                       if not ok and r in self.dense.pending]
        if waiting:
            signals = self.catalog.signals([r for r, _ in waiting])
            for r, x in waiting:
                created, trust = signals.get(r, (now, 0.5))
                out.append((r, self.lexical_weight * x
                            + self.recency_weight * math.exp(-decay * max(0.0, now - created))
                            + self.trust_weight * trust))
            out.sort(key=lambda t: -t[1])
        return out[:k]

    def _defer_asks(self, fused: Floats, rowids: npt.NDArray[np.int64],
                    nxt: npt.NDArray[np.int64]) -> Floats:
        """``fused`` with each asking record's share moved to the next record of its
        session (the last of a session keeps it: no answer is known)."""
        src = np.flatnonzero(fused > 0)
        src = src[nxt[src] != src]
        share = self.asks.of(rowids[src]).astype(np.float64) * fused[src]
        if len(src):
            fused[src] -= share
            np.add.at(fused, nxt[src], share)
        return fused


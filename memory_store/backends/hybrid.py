"""``hybrid`` backend: BM25 and dense scores fused, plus recency and trust."""

from __future__ import annotations

import math
from typing import Any

from memory_store.backends.vector import VectorMemory
from memory_store.embed import Embedder
from memory_store.filters import SearchFilters
from memory_store.group import GroupDirectory

DAY = 86_400.0


def _minmax(ranking: list[tuple[int, float]]) -> dict[int, float]:
    if not ranking:
        return {}
    hi = max(s for _, s in ranking)
    lo = min(s for _, s in ranking)
    span = hi - lo
    if span <= 0:
        return dict.fromkeys((r for r, _ in ranking), 1.0)
    return {r: (s - lo) / span for r, s in ranking}


class HybridMemory(VectorMemory):
    """Convex combination of min-max normalized BM25 and dense scores, each over a
    candidate pool of ``pool`` records (a record missing from one pool scores 0 there),
    then two small priors: recency (exponential decay with a half-life) and trust.

    Score fusion beat reciprocal rank fusion on LoCoMo (bench/README.md): RRF throws
    away how far ahead the top lexical hit is, which matters when one retriever is
    much stronger on a query. ``fusion="rrf"`` keeps RRF (k=60) available.
    """

    backend = "hybrid"

    def __init__(self, group: GroupDirectory, *, embedder: Embedder | None = None,
                 lexical_weight: float = 1.0, dense_weight: float = 1.0,
                 recency_weight: float = 0.02, trust_weight: float = 0.02,
                 half_life_days: float = 90.0, pool: int = 200, fusion: str = "score",
                 rrf_k: float = 60.0, **options: Any) -> None:
        if fusion not in ("score", "rrf"):
            raise ValueError(f"fusion must be 'score' or 'rrf', got {fusion!r}")
        super().__init__(group, embedder=embedder, **options)
        self.lexical_weight = lexical_weight
        self.dense_weight = dense_weight
        self.recency_weight = recency_weight
        self.trust_weight = trust_weight
        self.half_life_days = half_life_days
        self.pool = pool
        self.fusion = fusion
        self.rrf_k = rrf_k

    def _rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        pool = max(self.pool, 2 * k)
        lexical = self.catalog.lexical(query, pool, filters)
        dense = self._dense_rank(query, pool, filters)
        fused: dict[int, float] = {}
        if self.fusion == "rrf":
            for weight, ranking in ((self.lexical_weight, lexical), (self.dense_weight, dense)):
                for rank, (rowid, _score) in enumerate(ranking):
                    fused[rowid] = fused.get(rowid, 0.0) + weight / (self.rrf_k + rank + 1)
        else:
            for weight, ranking in ((self.lexical_weight, lexical), (self.dense_weight, dense)):
                for rowid, norm in _minmax(ranking).items():
                    fused[rowid] = fused.get(rowid, 0.0) + weight * norm
        now = filters.now.timestamp() if filters.now else 0.0
        signals = self.dense.signals(list(fused))
        decay = math.log(2) / (self.half_life_days * DAY)
        for rowid, (created, trust) in signals.items():
            age = max(0.0, now - created)
            fused[rowid] += self.recency_weight * math.exp(-decay * age)
            fused[rowid] += self.trust_weight * trust
        return sorted(fused.items(), key=lambda kv: kv[1], reverse=True)[:k]

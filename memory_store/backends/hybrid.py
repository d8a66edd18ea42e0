"""``hybrid`` backend: BM25 and dense rankings fused, plus recency and trust."""

from __future__ import annotations

import math
from typing import Any

from memory_store.backends.vector import VectorMemory
from memory_store.embed import Embedder
from memory_store.filters import SearchFilters
from memory_store.group import GroupDirectory

DAY = 86_400.0


class HybridMemory(VectorMemory):
    """Weighted reciprocal rank fusion (Cormack et al. 2009, k=60) of the BM25 and the
    dense rankings, each over a candidate pool larger than ``k``; then two small
    priors: recency (exponential decay with a half-life) and trust (from the source).
    The priors only reorder near-ties: the fused rank score of a top hit is ~0.03,
    the priors add at most ``recency_weight + trust_weight``.
    """

    backend = "hybrid"

    def __init__(self, group: GroupDirectory, *, embedder: Embedder | None = None,
                 rrf_k: float = 60.0, lexical_weight: float = 1.0, dense_weight: float = 1.0,
                 recency_weight: float = 0.002, trust_weight: float = 0.002,
                 half_life_days: float = 90.0, pool: int = 100, **options: Any) -> None:
        super().__init__(group, embedder=embedder, **options)
        self.rrf_k = rrf_k
        self.lexical_weight = lexical_weight
        self.dense_weight = dense_weight
        self.recency_weight = recency_weight
        self.trust_weight = trust_weight
        self.half_life_days = half_life_days
        self.pool = pool

    def _rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        pool = max(self.pool, 2 * k)
        lexical = self.catalog.lexical(query, pool, filters)
        dense = self._dense_rank(query, pool, filters)
        fused: dict[int, float] = {}
        for weight, ranking in ((self.lexical_weight, lexical), (self.dense_weight, dense)):
            for rank, (rowid, _score) in enumerate(ranking):
                fused[rowid] = fused.get(rowid, 0.0) + weight / (self.rrf_k + rank + 1)
        now = filters.now.timestamp() if filters.now else 0.0
        signals = self.dense.signals(list(fused))
        decay = math.log(2) / (self.half_life_days * DAY)
        for rowid, (created, trust) in signals.items():
            age = max(0.0, now - created)
            fused[rowid] += self.recency_weight * math.exp(-decay * age)
            fused[rowid] += self.trust_weight * trust
        return sorted(fused.items(), key=lambda kv: kv[1], reverse=True)[:k]

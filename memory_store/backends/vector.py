"""``vector`` backend: local MiniLM embeddings, exact cosine search."""

from __future__ import annotations

from typing import Any

from memory_store.base import BaseMemory
from memory_store.dense import DenseIndex
from memory_store.embed import Embedder, default_embedder
from memory_store.filters import SearchFilters
from memory_store.group import GroupDirectory


class VectorMemory(BaseMemory):
    """Dense retrieval: cosine similarity of all-MiniLM-L6-v2 embeddings, computed on
    the CPU with onnxruntime. ``embedder`` swaps the model (tests share one instance)."""

    backend = "vector"

    def __init__(self, group: GroupDirectory, *, embedder: Embedder | None = None,
                 **options: Any) -> None:
        self.dense = DenseIndex(embedder or default_embedder())
        super().__init__(group, hooks=[self.dense], **options)

    def _dense_rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        qvec = self.dense.embedder.embed([query])[0]
        allowed = None if filters.only_superseded_check else self.catalog.allowed(filters)
        now = filters.now.timestamp() if filters.now else 0.0
        return self.dense.search(qvec, k, now=now, allowed=allowed,
                                 include_superseded=filters.include_superseded)

    def _rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        return self._dense_rank(query, k, filters)

"""``vector`` backend: local MiniLM embeddings, exact cosine search over int8 vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory_store._base import BaseMemory
from memory_store.files._group import GroupDirectory
from memory_store.index._catalog import IndexHook
from memory_store.index._dense import DenseIndex
from memory_store.index._dense_fill import DenseFiller
from memory_store.index._embed import Embedder, default_embedder
from memory_store.ranking._filters import SearchFilters


class VectorMemory(BaseMemory):
    """Dense retrieval: cosine similarity of all-MiniLM-L6-v2 embeddings, computed on
    the CPU with onnxruntime. ``embedder`` swaps the model (tests share one instance).

    Writes do not wait for the model: vectors are computed in batches by a background
    thread (``background=False``: only by :meth:`flush`). Until then a record is found
    through its text (BM25 over the records not embedded yet).
    """

    backend = "vector"

    def __init__(self, group: GroupDirectory, *, embedder: Embedder | None = None,
                 background: bool = True, hooks: Sequence[IndexHook] = (),
                 **options: Any) -> None:
        self.dense = DenseIndex(embedder or default_embedder(), group.index_dir)
        super().__init__(group, hooks=[self.dense, *hooks], **options)
        self.filler = DenseFiller(self.dense, self.catalog, background=background)

    def close(self) -> None:
        self.filler.close()
        super().close()
        self.dense.close()

    def footprint_bytes(self) -> int:
        return super().footprint_bytes() + self.dense.footprint_bytes()

    def flush(self, timeout: float | None = None) -> None:
        """Embed every pending record now (tests, benchmarks, before a backup)."""
        self.catalog.refresh()
        self.filler.flush(timeout)

    def _rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        qvec = self.dense.embedder.embed([query])[0]
        allowed = None if filters.only_superseded_check else self.catalog.allowed(filters)
        now = filters.now.timestamp() if filters.now else 0.0
        with self.dense.lock:
            # One moment for both: a record embedded right after the dense search would
            # otherwise be in neither list.
            ranked = self.dense.search(qvec, k, now=now, allowed=allowed,
                                       include_superseded=filters.include_superseded)
            pending = list(self.dense.pending)
        extra = self.catalog.lexical_among(query, pending, k, filters) if pending else []
        if not extra:
            return ranked
        # Not embedded yet: rank by text, the best text match at 1.0 (a cosine rarely
        # reaches it). Such records are seconds old, and found by their words.
        best = max(s for _, s in extra)
        merged = ranked + [(r, s / best if best > 0 else 0.0) for r, s in extra]
        merged.sort(key=lambda t: -t[1])
        return merged[:k]

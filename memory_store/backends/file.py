"""``file`` backend: the Markdown files plus SQLite FTS5 BM25. No model needed."""

from __future__ import annotations

from memory_store._base import BaseMemory
from memory_store.ranking._filters import SearchFilters


class FileMemory(BaseMemory):
    """Lexical search (BM25 with Porter stemming, stopwords dropped from the query)."""

    backend = "file"

    def _rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        return self.catalog.lexical(query, k, filters)

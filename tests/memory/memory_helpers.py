"""Shared constants and options for the memory tests (imported by conftest and tests)."""

from __future__ import annotations

from typing import Any

BACKENDS = ["file", "vector", "hybrid"]
GROUP = "test:g1"


def backend_options(backend: str) -> dict[str, Any]:
    """Options shared by all memories of a backend in this test session.

    Vector and hybrid memories share the process-wide embedder (the real MiniLM model),
    so the model loads once per test session.
    """
    if backend == "file":
        return {}
    from memory_store.index import default_embedder

    return {"embedder": default_embedder()}

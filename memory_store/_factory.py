"""``open_memory``: pick a backend by name (configuration alone decides)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory_store._base import BaseMemory
from memory_store.files._group import GroupDirectory

BACKENDS = ("file", "vector", "hybrid")


def open_memory(data_dir: Path | str, group: str, backend: str = "file",
                **options: Any) -> BaseMemory:
    """Open the memory of ``group`` (``<channel>:<chat>``) under ``data_dir``.

    Creates the group directory on first contact. ``options`` go to the backend
    (``actor``, ``summarizer``, ``durable``, ``watch``, ``inotify`` (an instance the
    process shares among its groups); vector/hybrid also ``embedder``).
    Raises ``ValueError`` for an unknown backend and ``InvalidGroupKey`` for a bad group.
    """
    gd = GroupDirectory(Path(data_dir), group)
    return open_group(gd, backend, **options)


def open_group(gd: GroupDirectory, backend: str = "file", **options: Any) -> BaseMemory:
    """Like :func:`open_memory` for an existing :class:`GroupDirectory`."""
    if backend == "file":
        from memory_store.backends.file import FileMemory

        return FileMemory(gd, **options)
    if backend == "vector":
        from memory_store.backends.vector import VectorMemory

        return VectorMemory(gd, **options)
    if backend == "hybrid":
        from memory_store.backends.hybrid import HybridMemory

        return HybridMemory(gd, **options)
    raise ValueError(f"unknown memory backend {backend!r}; use one of {', '.join(BACKENDS)}")

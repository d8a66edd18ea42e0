"""Per-group memory over a directory of plain Markdown files.

Imports nothing from gateway, channels or workers: a library anyone can reuse.
"""

from __future__ import annotations

from memory_store.errors import InvalidGroupKey, InvalidMemoryId, MemoryNotFound
from memory_store.paths import global_dir, group_dir
from memory_store.protocol import Memory, MemoryRecord

__all__ = [
    "InvalidGroupKey",
    "InvalidMemoryId",
    "Memory",
    "MemoryNotFound",
    "MemoryRecord",
    "global_dir",
    "group_dir",
]

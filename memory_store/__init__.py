"""Per-group memory over a directory of plain Markdown files.

Imports nothing from gateway, channels or workers: a library anyone can reuse.
"""

from __future__ import annotations

from memory_store.backends.file import FileMemory
from memory_store.base import BaseMemory, Summarizer
from memory_store.errors import InvalidGroupKey, InvalidMemoryId, MemoryNotFound
from memory_store.factory import BACKENDS, open_group, open_memory
from memory_store.group import CoreMemory, GroupDirectory
from memory_store.paths import global_dir, group_dir, is_person_key, person_key
from memory_store.protocol import Memory, MemoryRecord
from memory_store.watch import Inotify, make_inotify

__all__ = [
    "BACKENDS",
    "BaseMemory",
    "CoreMemory",
    "FileMemory",
    "GroupDirectory",
    "Inotify",
    "InvalidGroupKey",
    "InvalidMemoryId",
    "Memory",
    "MemoryNotFound",
    "MemoryRecord",
    "Summarizer",
    "global_dir",
    "group_dir",
    "is_person_key",
    "make_inotify",
    "open_group",
    "open_memory",
    "person_key",
]

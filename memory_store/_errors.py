"""Errors raised by memory_store."""

from __future__ import annotations


class MemoryError_(Exception):
    """Base of memory_store errors."""


class InvalidGroupKey(MemoryError_, ValueError):
    """A group key that cannot name a directory inside the data dir."""


class InvalidMemoryId(MemoryError_, ValueError):
    """A memory id that is malformed or would escape its group directory."""


class MemoryNotFound(MemoryError_, KeyError):
    """No memory with that id in this group."""

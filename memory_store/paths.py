"""Group key -> group directory, safely.

A group key (``<channel>:<chat_id>``) becomes ``<data>/groups/<channel>/<chat>``. Each
component is sanitized to ``[A-Za-z0-9._-]`` with anything else percent-style escaped,
so distinct keys stay distinct, ``..``/NUL/slashes cannot appear, and the resolved path
is checked to lie under the data dir.
"""

from __future__ import annotations

import re
from pathlib import Path

from memory_store.errors import InvalidGroupKey

GLOBAL_GROUP = "global"
_SAFE = re.compile(r"[A-Za-z0-9_-]")
_MAX_COMPONENT = 120


def _component(raw: str) -> str:
    if not raw:
        raise InvalidGroupKey("empty group key component")
    out = "".join(ch if _SAFE.fullmatch(ch) else f"~{ord(ch):x}~" for ch in raw)
    if len(out) > _MAX_COMPONENT:
        import hashlib

        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out = f"{out[: _MAX_COMPONENT - 17]}_{digest}"
    return out


def groups_root(data_dir: Path) -> Path:
    return Path(data_dir).resolve() / "groups"


def group_dir(data_dir: Path, group: str) -> Path:
    """The directory of ``group`` (``<channel>:<chat_id>``) under ``data_dir``.

    Raises ``InvalidGroupKey`` for a key that has no channel or chat part, or names
    the operator's global directory.
    """
    channel, sep, chat = group.partition(":")
    if not sep or not channel or not chat:
        raise InvalidGroupKey(f"group key must be '<channel>:<chat>', got {group!r}")
    root = groups_root(data_dir)
    path = (root / _component(channel) / _component(chat)).resolve()
    if root not in path.parents or path.parent.parent != root:
        raise InvalidGroupKey(f"group key {group!r} escapes the data dir")
    if path.parent.name == GLOBAL_GROUP and path.parent.parent == root:
        raise InvalidGroupKey("'global' is the operator's directory, not a channel")
    return path


def global_dir(data_dir: Path) -> Path:
    """The operator's read-only global memory directory."""
    return groups_root(data_dir) / GLOBAL_GROUP

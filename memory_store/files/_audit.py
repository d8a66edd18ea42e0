"""Append-only audit log of every change to a group's memory (``.meta/audit.jsonl``;
``audit.jsonl`` at the root before schema version 2, ``memory_store/files/_schema.py``).

One JSON object per line: ``ts``, ``actor`` (who), ``op`` (what), ``id``, ``path``,
``old_hash``/``new_hash`` (blake2b-128 of the file bytes, null for create/delete), and
``turn`` when the change belongs to a turn, so a retried turn can see what it already wrote.
Lines are written with O_APPEND in one ``write`` call, which keeps concurrent appenders from
interleaving on local file systems; writers also hold the group lock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memory_store.files._fileformat import now_utc
from memory_store.files._schema import META_DIR

AUDIT_FILE = "audit.jsonl"


class AuditLog:
    """The audit log of one group directory."""

    def __init__(self, group_path: Path) -> None:
        self.path = Path(group_path) / META_DIR / AUDIT_FILE

    def append(self, *, actor: str, op: str, memory_id: str, path: str,
               old_hash: str | None, new_hash: str | None, **extra: Any) -> None:
        entry: dict[str, Any] = {
            "ts": now_utc().isoformat(),
            "actor": actor,
            "op": op,
            "id": memory_id,
            "path": path,
            "old_hash": old_hash,
            "new_hash": new_hash,
        }
        entry.update({k: v for k, v in extra.items() if v is not None})
        self.path.parent.mkdir(exist_ok=True)
        append_json_line(self.path, entry)

    def newest_first(self, block: int = 64 * 1024) -> Iterator[dict[str, Any]]:
        """Every entry, newest first, reading the file backwards a block at a time (a
        caller that wants the last few entries does not read a long log)."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            end = fh.seek(0, os.SEEK_END)
            rest = b""
            while end > 0:
                start = max(0, end - block)
                fh.seek(start)
                chunk = fh.read(end - start) + rest
                end = start
                lines = chunk.split(b"\n")
                rest = lines.pop(0) if end > 0 else b""
                for line in reversed(lines):
                    if (item := json_line(line)) is not None:
                        yield item

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every entry, oldest first; lines that do not parse are skipped."""
        try:
            fh = self.path.open("r", encoding="utf-8")
        except FileNotFoundError:
            return
        with fh:
            for line in fh:
                if (item := json_line(line)) is not None:
                    yield item


def append_json_line(path: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to ``path`` as one JSON line, in one O_APPEND ``write``."""
    line = (json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def json_line(line: str | bytes) -> dict[str, Any] | None:
    """One line's entry; None for a blank or damaged line (skipped)."""
    try:
        item = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return item if isinstance(item, dict) else None

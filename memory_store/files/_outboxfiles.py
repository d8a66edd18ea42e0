"""A chat's files waiting for the outbox: ``outbox_files/<sha256>`` (the bytes a turn's
``send_file`` stored) plus ``<sha256>.json``, the reply ids of the sends that name it.

The worker stores a file with its reference (``store``); the gateway sends it by hash
(``gateway.outgoing._filesend``) and its hourly sweep drops the files every referring send is done
with, or that waited past the retention (``listing`` then ``remove``). Content-addressed,
so the same bytes sent by two turns are one file with two references; storing again
refreshes its time, so the retention counts from the newest reference. Every change
holds the folder's file lock, across processes: a reference added while the sweep
decided is seen, and the file stays.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from memory_store.files._atomic import atomic_write_bytes, atomic_write_text, read_regular
from memory_store.files._attachments import SHA256, lock


@dataclass(frozen=True)
class Waiting:
    """One stored file: its hash, the reply ids of the sends naming it, its time."""

    sha256: str
    refs: tuple[str, ...]
    stored_at: float


def _refs_path(folder: Path, sha256: str) -> Path:
    return folder / f"{sha256}.json"


def _refs(folder: Path, sha256: str) -> tuple[str, ...]:
    try:
        data = json.loads(read_regular(_refs_path(folder, sha256)))
    except (OSError, ValueError):
        return ()  # none yet, or unreadable: only the retention removes the file
    refs = data.get("refs") if isinstance(data, dict) else None
    return tuple(str(r) for r in refs) if isinstance(refs, list) else ()


def store(folder: Path, sha256: str, data: bytes, ref: str) -> Path:
    """Keep ``data`` (whose hash is ``sha256``) for the send ``ref``; returns its path."""
    if not SHA256.fullmatch(sha256):
        raise ValueError("a file is named by its sha256, 64 lowercase hex digits")
    target = folder / sha256
    with lock(folder):
        refs = _refs(folder, sha256)
        if ref not in refs:
            atomic_write_text(_refs_path(folder, sha256),
                              json.dumps({"refs": [*refs, ref]}) + "\n")
        if target.exists():
            os.utime(target)
        else:
            atomic_write_bytes(target, data)
    return target


def listing(folder: Path) -> list[Waiting]:
    """Every stored file of ``folder`` with its references (read without the lock: a
    sweep decides from it, and ``remove`` checks again under the lock)."""
    out: list[Waiting] = []
    if not folder.is_dir():
        return out
    for path in sorted(folder.iterdir()):
        if not SHA256.fullmatch(path.name):
            continue
        try:
            stored_at = path.stat().st_mtime
        except OSError:
            continue
        out.append(Waiting(path.name, _refs(folder, path.name), stored_at))
    return out


def remove(folder: Path, seen: Waiting) -> bool:
    """Delete the file ``seen`` and its references, unless it changed since it was
    listed (a new reference, or stored again); True if it was deleted."""
    with lock(folder):
        target = folder / seen.sha256
        try:
            if target.stat().st_mtime != seen.stored_at or \
                    _refs(folder, seen.sha256) != seen.refs:
                return False
            target.unlink()
        except FileNotFoundError:
            return False
        _refs_path(folder, seen.sha256).unlink(missing_ok=True)
    return True

"""Write one received file into its group's ``attachments/`` (the layout and the
sidecar's fields: ``memory_store.files._attachments``), through ``GroupFiles``.

``put`` is idempotent: the file is named by its SHA-256, written atomically (temp file,
fsync, rename) only when absent, and the sidecar lists each message that sent it once,
so a download redone after a crash stores nothing twice. The original file name is kept
in the sidecar as data; it never becomes a path.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gateway.intake._groupfiles import GroupFiles
from gateway.media.sniff import Sniffed
from memory_store.files import atomic_write_bytes
from memory_store.files import attachments as files

#: longest original name kept in a sidecar (it is shown to the model as data)
NAME_MAX = 200


@dataclass(frozen=True)
class Received:
    """Where a file came from: recorded in its sidecar."""

    channel: str
    message_id: str
    name: str | None
    received: float  # epoch seconds


@dataclass(frozen=True)
class Stored:
    sha256: str
    stored: str  # "<sha256>.<ext>" in the group's attachments/
    size: int
    sniffed: Sniffed


def put(groupfiles: GroupFiles, group: str, data: bytes, sniffed: Sniffed,
        came: Received) -> Stored:
    """Store ``data`` (already sniffed) for ``group``; returns its name and hash."""
    sha = hashlib.sha256(data).hexdigest()
    stored = f"{sha}.{sniffed.ext}"
    path = groupfiles.attachments(group)
    with files.lock(path):
        target = path / stored
        if not target.is_file() or target.stat().st_size != len(data):
            atomic_write_bytes(target, data)
        side = path / f"{sha}.json"
        old = next((d for s, d in files.sidecars(path) if s == side), {})
        refs = [r for r in old.get("messages", []) if isinstance(r, dict)]
        ref = {"channel": came.channel, "message_id": came.message_id,
               "name": (came.name or "")[:NAME_MAX], "received": came.received}
        if not any(r.get("message_id") == came.message_id
                   and r.get("channel") == came.channel for r in refs):
            refs.append(ref)
        files.write_sidecar(side, {
            "sha256": sha, "stored": stored, "type": sniffed.kind, "mime": sniffed.mime,
            "size": len(data), "name": refs[0].get("name", ""), "channel": came.channel,
            "messages": refs,
            "received": old.get("received", came.received),
            "last_received": max(float(old.get("last_received", 0) or 0), came.received),
            **({"width": sniffed.width, "height": sniffed.height}
               if sniffed.kind == "image" else {}),
        })
    return Stored(sha, stored, len(data), sniffed)


def used_bytes(groupfiles: GroupFiles, group: str, adding: bytes = b"") -> int:
    """Bytes of files stored for ``group`` (its sidecars' sizes); with ``adding``, minus
    that file's own if it is stored already (storing it again takes no room)."""
    path = groupfiles.attachments(group)
    used = sum(int(d.get("size", 0) or 0) for _, d in files.sidecars(path))
    if adding and (path / f"{hashlib.sha256(adding).hexdigest()}.json").is_file():
        used -= len(adding)
    return used

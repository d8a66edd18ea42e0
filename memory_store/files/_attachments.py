"""A group's received files: ``attachments/<sha256>.<ext>`` plus a JSON sidecar
``<sha256>.json`` (type, sniffed mime, size, the original name as data, channel, the
messages that sent it, when). Content-addressed, so storing the same bytes again (a
redone download) changes nothing but the sidecar's list of messages.

The gateway writes them (``gateway.media.store``); a turn reads them (``load``); a
transcription worker writes what an audio file said beside it (``<sha256>.transcript.txt``,
or ``<sha256>.transcript.err`` with why not: ``workers.transcribe``), which the gateway's
media job reads (``read_transcript``). A deletion of a message or ``/forget`` drops the
message from the sidecars and removes a file no message refers to any more, with its
transcript (``forget_messages``). Every read-modify-write of a
sidecar holds the folder's file lock, across processes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from memory_store.files._atomic import atomic_write_text, read_regular
from memory_store.files._group import GroupDirectory

ATTACHMENTS_FOLDER = "attachments"
LOCK = ".lock"
#: what a stored file's name looks like: nothing a sender chose goes into a path
STORED_NAME = re.compile(r"^[0-9a-f]{64}\.[a-z0-9]{1,5}$")
SHA256 = re.compile(r"[0-9a-f]{64}")
#: the metadata beside each stored file: ``<sha256>.json``
ATTACHMENT_SIDECAR_SUFFIX = ".json"
TRANSCRIPT_SUFFIX = ".transcript.txt"
TRANSCRIPT_FAILED_SUFFIX = ".transcript.err"


#: how the turn and the episode label a transcript
VOICE_LABEL = "voice note, transcribed"


@dataclass(frozen=True)
class Transcript:
    """What an audio attachment said (``text``), or why it has no text (``error``)."""

    text: str | None
    error: str | None = None

    def shown(self) -> str:
        """The line the turn and the episode show."""
        if self.text is None:
            return f"voice note (not transcribed: {self.error})"
        return f"{VOICE_LABEL}: {self.text.strip() or '(nothing said)'}"


def read_transcript(path: Path, sha256: str) -> Transcript | None:
    """The transcript of the file ``sha256`` in the ``attachments/`` folder ``path``, or
    why it failed; None while none is written."""
    if not SHA256.fullmatch(sha256):
        return None
    for suffix, failed in ((TRANSCRIPT_SUFFIX, False), (TRANSCRIPT_FAILED_SUFFIX, True)):
        try:
            text = read_regular(path / f"{sha256}{suffix}").decode("utf-8", errors="replace")
        except FileNotFoundError:
            continue
        return Transcript(None, text.strip()) if failed else Transcript(text)
    return None


def folder(gd: GroupDirectory) -> Path:
    return gd.path / ATTACHMENTS_FOLDER


def lock(path: Path) -> FileLock:
    """The cross-process lock of one ``attachments/`` folder."""
    path.mkdir(parents=True, exist_ok=True)
    return FileLock(path / LOCK, timeout=30)


def sidecars(path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(sidecar path, its content) of every readable sidecar in ``path``."""
    if not path.is_dir():
        return
    for side in sorted(path.glob("*" + ATTACHMENT_SIDECAR_SUFFIX)):
        try:
            data = json.loads(read_regular(side))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            yield side, data


def write_sidecar(side: Path, data: dict[str, Any]) -> None:
    atomic_write_text(side, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _sweep(path: Path, drop: Callable[[Path, dict[str, Any]], bool]) -> list[str]:
    """Under the folder's lock, delete each stored file whose sidecar ``drop`` picks,
    with its transcript and its sidecar (the sidecar last: it is what finds the
    others). Returns the removed files' names."""
    removed: list[str] = []
    if not path.is_dir():
        return removed
    with lock(path):
        for side, data in sidecars(path):
            if not drop(side, data):
                continue
            stored = str(data.get("stored", ""))
            if STORED_NAME.match(stored):
                sha = stored.partition(".")[0]
                for name in (stored, sha + TRANSCRIPT_SUFFIX, sha + TRANSCRIPT_FAILED_SUFFIX):
                    (path / name).unlink(missing_ok=True)
                removed.append(stored)
            side.unlink(missing_ok=True)
    return removed


def load(gd: GroupDirectory, stored: str) -> bytes:
    """The bytes of the stored file ``stored`` (``<sha256>.<ext>``). Raises
    ``FileNotFoundError`` when it is gone (deleted, expired) or the name is not one."""
    if not STORED_NAME.match(stored):
        raise FileNotFoundError(stored)
    return read_regular(folder(gd) / stored)


def forget_messages(gd: GroupDirectory, message_ids: Collection[str] | None) -> list[str]:
    """Drop ``message_ids`` (platform ids; ``None``: every message) from the group's
    sidecars and delete each file no message refers to any more. Returns the removed
    files' names."""
    wanted = None if message_ids is None else set(message_ids)

    def drop(side: Path, data: dict[str, Any]) -> bool:
        refs = [r for r in data.get("messages", []) if isinstance(r, dict)]
        keep = [] if wanted is None else [r for r in refs
                                          if r.get("message_id") not in wanted]
        if len(keep) == len(refs) and wanted is not None:
            return False
        if keep:
            write_sidecar(side, {**data, "messages": keep})
        return not keep

    return _sweep(folder(gd), drop)


def expire(path: Path, days: float, now: float | None = None) -> list[str]:
    """Delete the files of the ``attachments/`` folder ``path`` last received more than
    ``days`` ago; returns their names."""
    if days <= 0:
        return []
    cutoff = (time.time() if now is None else now) - days * 86400
    return _sweep(path, lambda _, data: float(data.get("last_received", 0) or 0) < cutoff)


def forget_stored(gd: GroupDirectory, stored: Collection[str],
                  name: re.Pattern[str] | None = None) -> list[str]:
    """Delete the files named in ``stored`` and those whose original name (as any
    message sent it) ``name`` matches, whatever messages refer to them (``/forget``).
    Returns the removed files' names."""
    def drop(_: Path, data: dict[str, Any]) -> bool:
        names = [str(r.get("name", "")) for r in data.get("messages", [])
                 if isinstance(r, dict)] + [str(data.get("name", ""))]
        return data.get("stored") in stored or (
            name is not None and any(n and name.search(n) for n in names))

    return _sweep(folder(gd), drop)

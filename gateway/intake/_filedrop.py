"""File triggers: a file dropped into a group's ``inbox/`` folder becomes one message.

Every :data:`SCAN_INTERVAL` seconds the gateway lists ``<data>/groups/<channel>/<chat>/
inbox/``. A regular file is taken when it is complete:

* it was renamed in (or its times were set after its last write, as ``cp -p`` and
  ``rsync`` do): its inode's change time is later than its modification time, which
  every write sets to the same instant; or
* its size, modification time and inode stayed the same for :data:`STABLE_SECONDS`
  (a file still being written keeps moving).

Dot-files, sub-folders and the temporary files of editors and downloaders
(:func:`ignored`) are left alone. A taken file becomes one engaged message to the group
from "operator file" (its text up to :data:`TEXT_CAP_BYTES`, other files by name, size
and type), pushed through the inbox like any message, then moved to ``inbox/done/``.

Never twice: the message id is the file's identity (device, inode, modification and
change times, size), so a gateway that dies between the push and the move pushes it again after the
restart and the inbox's dedupe drops the copy; the move follows. Whatever the file
says is someone else's text (``forwarded_from``: quoted trust, never instructions); the
operator who dropped it has no chat identity to lend it more.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import mimetypes
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from channels.models import Inbound
from gateway import wait_any
from gateway.intake._groupfiles import GroupFiles
from memory_store.files import fsync_dir

log = logging.getLogger(__name__)

INBOX_DIR = "inbox"
DONE_DIR = "done"
#: seconds a file's size and mtime must stay unchanged before it is taken (the issue's)
STABLE_SECONDS = 2.0
SCAN_INTERVAL = 1.0
#: bytes of a text file put into the message; the rest is cut with a note
TEXT_CAP_BYTES = 32 * 1024
SENDER_ID = "operator-file"
FILE_DROP_SENDER_NAME = "operator file"
#: name endings of files still being written by an editor, a browser or a copy tool
_TEMP_SUFFIXES = (".tmp", ".temp", ".part", ".partial", ".crdownload", ".download",
                  ".swp", ".swx", ".filepart", "~")
#: name beginnings of lock and autosave files (Office "~$x.docx", Emacs "#x#")
_TEMP_PREFIXES = (".", "~$", "#")

Accept = Callable[[Inbound], Awaitable[str]]


def ignored(name: str) -> bool:
    """Whether a file in ``inbox/`` is never taken: a dot-file or a temporary file."""
    low = name.lower()
    return low.startswith(_TEMP_PREFIXES) or low.endswith(_TEMP_SUFFIXES)


@dataclass
class _Seen:
    identity: tuple[int, int, int, int]
    since: float


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def message_id(st: os.stat_result, name: str) -> str:
    """The file's message id: the same for the same file across restarts, new for a
    file dropped again (a new inode or modification time; a file moved back in from
    ``done/`` keeps both, but the move sets its change time)."""
    raw = f"{':'.join(map(str, _identity(st)))}:{st.st_ctime_ns}:{name}"
    return "file-" + hashlib.blake2b(raw.encode("utf-8", "surrogateescape"),
                                     digest_size=12).hexdigest()


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    size = n / 1024
    for unit in ("KB", "MB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _as_text(head: bytes) -> str | None:
    """The text of a file's first bytes, or None if it is not UTF-8 text."""
    if b"\0" in head:
        return None
    cut = head[:TEXT_CAP_BYTES]
    try:
        return cut.decode("utf-8")
    except UnicodeDecodeError as err:
        if len(head) > TEXT_CAP_BYTES and err.start >= len(cut) - 3:
            return cut[:err.start].decode("utf-8")  # a character split by the cap
        return None


def file_message(group: str, path: Path, st: os.stat_result) -> Inbound:
    """The message a dropped file becomes."""
    channel, _, chat = group.partition(":")
    name = path.name
    mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
    head = f"[file {name!r} dropped into the inbox: {_size(st.st_size)}, {mime}]"
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        text = _as_text(fh.read(TEXT_CAP_BYTES + 1))
    if text is None:
        body = f"{head} (not text: its content is not shown)"
    else:
        body = f"{head}\n{text}"
        if st.st_size > TEXT_CAP_BYTES:
            body += f"\n[... cut: only the first {TEXT_CAP_BYTES} bytes are shown ...]"
    return Inbound(channel=channel, chat_id=chat, is_group=True, sender_id=SENDER_ID,
                   sender_name=FILE_DROP_SENDER_NAME, message_id=message_id(st, name), text=body,
                   mentions_bot=True, forwarded_from=f"the file {name!r} in the inbox")


def move_done(path: Path, msg_id: str) -> Path:
    """Move a taken file to ``inbox/done/`` (a name already there gets the id added)."""
    done = path.parent / DONE_DIR
    done.mkdir(exist_ok=True)
    target = done / path.name
    if target.exists():
        target = done / f"{path.stem}.{msg_id[-8:]}{path.suffix}"
    os.rename(path, target)
    fsync_dir(done)
    fsync_dir(path.parent)
    return target


class FileDrop:
    """Watches every group's ``inbox/`` and hands complete files to ``accept`` (the
    gateway's inbox, without its chat routing: the operator's files always engage)."""

    def __init__(self, data_dir: Path, accept: Accept, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.data_dir = Path(data_dir)
        self.accept = accept
        self.clock = clock
        self._seen: dict[Path, _Seen] = {}

    def ready(self) -> list[tuple[str, Path, os.stat_result]]:
        """The files complete now (see the module docstring); remembers the others."""
        now = self.clock()
        out: list[tuple[str, Path, os.stat_result]] = []
        present: set[Path] = set()
        for group, inbox in GroupFiles(self.data_dir).chats_with(INBOX_DIR):
            with contextlib.suppress(FileNotFoundError), os.scandir(inbox) as entries:
                for entry in entries:
                    if ignored(entry.name) or not entry.is_file(follow_symlinks=False):
                        continue
                    path = Path(entry.path)
                    st = entry.stat(follow_symlinks=False)
                    present.add(path)
                    seen = self._seen.get(path)
                    if st.st_ctime_ns > st.st_mtime_ns or (
                            seen is not None and seen.identity == _identity(st)
                            and now - seen.since >= STABLE_SECONDS):
                        out.append((group, path, st))
                    elif seen is None or seen.identity != _identity(st):
                        self._seen[path] = _Seen(_identity(st), now)
        for gone in set(self._seen) - present:
            del self._seen[gone]
        return out

    async def scan_once(self) -> list[Path]:
        """Take every complete file: push it, then move it to ``done/``. A file whose
        push fails stays for the next scan."""
        moved: list[Path] = []
        for group, path, st in self.ready():
            try:
                msg = await asyncio.to_thread(file_message, group, path, st)
                outcome = await self.accept(msg)
                target = await asyncio.to_thread(move_done, path, msg.message_id)
            except FileNotFoundError:
                continue  # taken away meanwhile
            except (redis.RedisError, OSError) as err:
                log.warning("inbox file %s of %s not taken yet: %s", path.name, group, err)
                continue
            self._seen.pop(path, None)
            log.info("inbox file %s of %s: %s, moved to %s", path.name, group, outcome,
                     target.relative_to(path.parent))
            moved.append(target)
        return moved

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.scan_once()
            await wait_any(SCAN_INTERVAL, stop)

"""A group's directory: its layout, its core memory files, its lock.

```
<data>/groups/<channel>/<chat>/
  CLAUDE.md  user_profile.md  episodes/  entities/  procedures/  reflections/  notes/
  inbox/ (files become messages; not in persons/<id>/)
  .meta/ (schema.json, audit.jsonl)  .backup/ (before a migration)  .index/ (derived)  .lock
```
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from memory_store.files._atomic import atomic_write_text
from memory_store.files._audit import AuditLog
from memory_store.files._fileformat import content_hash
from memory_store.files._paths import MEMORY_DIRS, global_dir, group_dir, is_person_key
from memory_store.files._schema import ensure_current
from memory_store.files._templates import CLAUDE_MD, USER_PROFILE_MD

CORE_FILE = "CLAUDE.md"
PROFILE_FILE = "user_profile.md"
#: a group's core files (the operator's global one is outside the group)
CORE_FILES = (CORE_FILE, PROFILE_FILE)
INDEX_DIR = ".index"
LOCK_FILE = ".lock"
#: files the operator drops here become messages to the group (gateway/intake/_filedrop.py)
INBOX_DIR = "inbox"
#: Core memory is always in the model's context; cap each file so a runaway edit
#: cannot blow the prompt.
CORE_LIMIT_CHARS = 16_000
#: A writer holds the lock for milliseconds; a minute means something is wedged.
LOCK_TIMEOUT = 60.0
_TRUNCATED = "\n\n[... truncated: file longer than {limit} characters ...]\n"


@dataclass(frozen=True)
class CoreMemory:
    """The always-in-context memory of one turn: operator, group and people files."""

    global_md: str
    group_md: str
    profile_md: str


def _read_bounded(path: Path, limit: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return ""
    if len(text) > limit:
        return text[:limit] + _TRUNCATED.format(limit=limit)
    return text


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class GroupDirectory:
    """The directory of exactly one group; every path it hands out lies inside it."""

    def __init__(self, data_dir: Path, group: str) -> None:
        self.data_dir = Path(data_dir)
        self.group = group
        self.path = group_dir(self.data_dir, group)
        self._lock = FileLock(self.path / LOCK_FILE, timeout=LOCK_TIMEOUT, poll_interval=0.002)
        self._core: tuple[tuple[object, ...], CoreMemory] | None = None
        #: the core files' hashes last found audited (``memory_store.files._coreedits``): a
        #: turn whose files still hash so reads no audit log back; None: not yet known
        self.core_audited: dict[str, str | None] | None = None

    def __repr__(self) -> str:
        return f"GroupDirectory({self.group!r})"

    @property
    def index_dir(self) -> Path:
        return self.path / INDEX_DIR

    @property
    def core_path(self) -> Path:
        return self.path / CORE_FILE

    @property
    def profile_path(self) -> Path:
        return self.path / PROFILE_FILE

    def ensure(self) -> GroupDirectory:
        """Create the layout, and CLAUDE.md / user_profile.md from templates if absent.

        Idempotent: existing files are never overwritten. A directory of an older
        schema is migrated first (``memory_store/files/_schema.py``); one of a newer schema is
        refused (``SchemaTooNew``).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        ensure_current(self)
        # a person's memory is no chat: nothing to drop files into
        inbox = () if is_person_key(self.group) else (INBOX_DIR,)
        for sub in (*MEMORY_DIRS, *inbox):
            (self.path / sub).mkdir(exist_ok=True)
        self.index_dir.mkdir(exist_ok=True)
        for path, template in ((self.core_path, CLAUDE_MD), (self.profile_path, USER_PROFILE_MD)):
            if not path.exists():
                with self.lock():
                    if not path.exists():
                        atomic_write_text(path, template)
                        # audited with its hash: a later hand edit is told apart from
                        # the project's own writes by that (memory_store/files/_coreedits.py)
                        AuditLog(self.path).append(
                            actor="memory_store", op="create", memory_id=path.name,
                            path=path.name, old_hash=None,
                            new_hash=content_hash(template.encode("utf-8")))
        return self

    def lock(self) -> FileLock:
        """The cross-process lock serializing read-modify-write of this group's files.

        One lock object per GroupDirectory: re-entrant within a thread (so a compound
        operation can hold it around simple ones); other threads and processes wait.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        return self._lock

    def core_memory(self, limit: int = CORE_LIMIT_CHARS) -> CoreMemory:
        """Global CLAUDE.md ("" if absent), this group's CLAUDE.md and user_profile.md.

        Kept between calls and re-read only when one of the three files' inode, mtime
        or size moved (three stats instead of three reads per turn)."""
        paths = (global_dir(self.data_dir) / CORE_FILE, self.core_path, self.profile_path)
        key = (limit, *(_signature(p) for p in paths))
        cached = self._core
        if cached is not None and cached[0] == key:
            return cached[1]
        core = CoreMemory(*(_read_bounded(p, limit) for p in paths))
        self._core = (key, core)
        return core

    def rel(self, path: Path) -> str:
        """``path``, inside this directory, relative to it ("/"-separated)."""
        return path.relative_to(self.path).as_posix()

    def memory_files(self, dirs: Iterable[str] = MEMORY_DIRS) -> Iterator[Path]:
        """Every memory file (``*.md`` in the memory sub-directories ``dirs`` and their
        one level of sub-folders, e.g. ``episodes/2024-05/``), unordered."""
        for sub in dirs:
            yield from _md_files(self.path / sub, depth=1)


def _md_files(folder: Path, depth: int) -> Iterator[Path]:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(folder):
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                if depth > 0:
                    yield from _md_files(Path(entry.path), depth - 1)
            elif entry.name.endswith(".md") and entry.is_file(follow_symlinks=False):
                yield Path(entry.path)

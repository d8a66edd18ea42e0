"""The schema version of a group directory, and the lazy migration that moves it forward.

A group directory records its layout's version in ``.meta/schema.json``
(``{"version": N}``); the files inside follow that version's layout and front matter. A
directory without the file was written before versions existed (version 1) unless it is
empty (a new group: it is stamped with :data:`SCHEMA_VERSION`).

Versions:

1. ``audit.jsonl`` at the group's root, next to the files a person edits.
2. The audit log moved to ``.meta/audit.jsonl``: bookkeeping lives in one hidden folder
   (with the version), so the root lists only memory and the directory reads cleanly as
   a Claude Code project. A version-1 reader finds no audit log here: it would lose the
   history a retried turn checks and the redaction trail.

Migration happens the first time a group is opened (``GroupDirectory.ensure``), under
the group lock, one step at a time. Each step that changes something runs:

```
  version N, untouched ──copy──▶ .backup/.vN.partial/   (a crash here: untouched;
                                                         the partial copy is dropped)
        ──rename──▶ .backup/vN/ (backup complete, MANIFEST.json)
        ──step──▶   files in version N+1's places (each move one rename, idempotent)
        ──write──▶  .meta/schema.json = N+1 (atomic)
```

A crash before the backup's rename leaves the group untouched; after it, the next open
finds version N with a complete backup and runs the (idempotent) step again. So a group is
always either untouched or migrated, with its backup. The backup is a copy (not hard
links: the audit log is appended in place), without the derived ``.index/``; redaction
scrubs it too (:func:`scrub_backups`). A directory from a newer version is refused
(:class:`SchemaTooNew`), never downgraded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from memory_store._errors import MemoryError_
from memory_store.files._atomic import atomic_write_text, fsync_dir, read_regular

if TYPE_CHECKING:
    from memory_store.files._group import GroupDirectory

#: the version this code reads and writes
SCHEMA_VERSION = 2
META_DIR = ".meta"
SCHEMA_FILE = "schema.json"
SCHEMA_BACKUP_DIR = ".backup"
BACKUP_MANIFEST = "MANIFEST.json"
#: version 1's audit log, at the group's root
V1_AUDIT = "audit.jsonl"
#: never copied into a backup: derived (rebuilt from the files), the lock, older backups
_NOT_BACKED_UP = frozenset({".index", ".lock", SCHEMA_BACKUP_DIR})

#: a test's probe: called with the name of each stage as the migration passes it
StageHook = Callable[[str], None]


class SchemaTooNew(MemoryError_):
    """The group directory was written by a newer PyNanoClaw than this one."""


@dataclass(frozen=True)
class _Step:
    """One migration step from ``version`` to ``version + 1``."""

    version: int
    #: does this directory hold anything the step changes? (nothing: no backup needed)
    needed: Callable[[Path], bool]
    #: do it; must be idempotent (it runs again after a crash)
    apply: Callable[[Path], None]


def _v1_to_v2(root: Path) -> None:
    old, new = root / V1_AUDIT, root / META_DIR / V1_AUDIT
    new.parent.mkdir(exist_ok=True)
    if not old.exists():
        return  # moved before a crash
    if new.exists():
        # Both exist only if a newer writer appended before this step finished: keep the
        # old lines first, then the new ones, in one atomic replace.
        merged = read_regular(old) + read_regular(new)
        atomic_write_text(new, merged.decode("utf-8", errors="replace"))
        old.unlink()
    else:
        os.rename(old, new)
    fsync_dir(new.parent)
    fsync_dir(root)


_STEPS: tuple[_Step, ...] = (_Step(1, lambda root: (root / V1_AUDIT).exists(), _v1_to_v2),)


def schema_path(root: Path) -> Path:
    return root / META_DIR / SCHEMA_FILE


def read_schema_version(root: Path) -> int | None:
    """The directory's version: the stamp, 1 for an unstamped directory that holds
    anything, None for an empty (new) one."""
    try:
        data = json.loads(read_regular(schema_path(root)))
    except FileNotFoundError:
        with os.scandir(root) as entries:
            return 1 if any(e.name != ".lock" for e in entries) else None
    except (ValueError, UnicodeDecodeError) as err:
        raise MemoryError_(f"{schema_path(root)}: not a schema stamp ({err}); restore it "
                           f"from {SCHEMA_BACKUP_DIR}/ or write {{\"version\": N}}") from None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise MemoryError_(f"{schema_path(root)}: 'version' must be a positive integer")
    return version


def _stamp(root: Path, version: int) -> None:
    atomic_write_text(schema_path(root), json.dumps({"version": version}) + "\n")


def ensure_current(gd: GroupDirectory, *, on_stage: StageHook = lambda _: None) -> int:
    """Bring ``gd``'s directory to :data:`SCHEMA_VERSION` (under its lock); returns the
    version it was at (``SCHEMA_VERSION`` for a new one). Raises :class:`SchemaTooNew`
    for a directory a newer version wrote."""
    root = gd.path
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError):
        if json.loads(read_regular(schema_path(root))).get("version") == SCHEMA_VERSION:
            return SCHEMA_VERSION  # the common case: one small read, no lock
    with gd.lock():
        found = read_schema_version(root)
        if found is None:
            _stamp(root, SCHEMA_VERSION)
            return SCHEMA_VERSION
        if found > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"group {gd.group!r} ({root}) has schema version {found}, but this "
                f"PyNanoClaw reads up to version {SCHEMA_VERSION}: run the newer version "
                f"that wrote it (directories are never downgraded)")
        for step in _STEPS[found - 1:]:
            if step.needed(root) or (root / SCHEMA_BACKUP_DIR / f"v{step.version}").exists():
                _backup(root, step.version, on_stage)
                step.apply(root)
                on_stage(f"v{step.version}:applied")
            _stamp(root, step.version + 1)
        return found


def _backup(root: Path, version: int, on_stage: StageHook) -> Path:
    """``.backup/v<version>/``: a copy of the group as it is before the step (kept if a
    crashed run already completed it: then it is the untouched original)."""
    final = root / SCHEMA_BACKUP_DIR / f"v{version}"
    if (final / BACKUP_MANIFEST).exists():
        return final
    partial = root / SCHEMA_BACKUP_DIR / f".v{version}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    files: list[str] = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name in _NOT_BACKED_UP:
                continue
            src = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.copytree(src, partial / entry.name, symlinks=True)
            elif entry.is_file(follow_symlinks=False):
                shutil.copy2(src, partial / entry.name)
            files.append(entry.name)
    manifest = {"from_version": version, "to_version": version + 1,
                "at": datetime.now(UTC).isoformat(), "entries": sorted(files)}
    atomic_write_text(partial / BACKUP_MANIFEST, json.dumps(manifest, indent=1) + "\n")
    on_stage(f"v{version}:copied")
    os.sync()  # every copied file on disk before the backup counts as complete
    shutil.rmtree(final, ignore_errors=True)  # a manifest-less leftover
    os.rename(partial, final)
    fsync_dir(final.parent)
    on_stage(f"v{version}:backed-up")
    return final


def scrub_backups(root: Path, scrub: Callable[[str], str]) -> list[str]:
    """Rewrite (atomically) every regular file of the group's backups whose text
    ``scrub`` changes; returns their paths relative to ``root``. The caller holds the
    group lock."""
    changed: list[str] = []
    paths = (Path(d) / n for d, _, names in os.walk(root / SCHEMA_BACKUP_DIR) for n in names)
    for path in paths:
        if not path.is_file() or path.is_symlink():
            continue
        with contextlib.suppress(FileNotFoundError):
            old = read_regular(path).decode("utf-8", errors="replace")
            new = scrub(old)
            if new != old:
                atomic_write_text(path, new)
                changed.append(path.relative_to(root).as_posix())
    return changed

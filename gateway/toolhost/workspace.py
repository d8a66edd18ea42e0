"""A group's workspace directory, its size against the quota, and the operator's extra
read-only mounts.

The workspace is ``<group dir>/workspace/``: the only writable mount of the group's
sandbox. Its size is what its files take on disk (blocks, symlinks not followed), so a
sparse file counts what it really uses. Mounts are host directories the operator listed
for a group; each is resolved (symlinks followed) and must stay under one of
``[tools] mount_roots``, else it is refused, never mounted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gateway.intake._groupfiles import GroupFiles
from gateway.toolhost.reach import grant_traverse

#: where the workspace appears inside the sandbox (also the command's working directory)
INSIDE = "/workspace"
#: extra mounts appear under this directory inside the sandbox
MOUNTS_INSIDE = "/mnt"


class MountRefused(ValueError):
    """An extra mount is missing, not a directory, or resolves outside its roots."""


def workspace_dir(data_dir: Path, group: str, owner: int | None = None) -> Path:
    """The group's workspace, created if missing. With ``owner`` (the sandbox's host uid,
    when the host runs as root) it is given to that uid, so commands can write in it,
    and the directories above it are made traversable by it (``reach``). Raises
    ``OSError`` (``reach.Unreachable``) when that cannot be done."""
    path = GroupFiles(data_dir).workspace(group)
    path.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        if path.is_symlink() or not path.is_dir():
            raise NotADirectoryError(f"{path} is not a directory")
        if path.stat().st_uid != owner:
            os.chown(path, owner, owner, follow_symlinks=False)
        grant_traverse(path, owner)
    return path


def usage_bytes(root: Path) -> int:
    """Bytes the files under ``root`` take on disk; symlinks are not followed."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue  # removed while walking (a command still running)
    return total


@dataclass(frozen=True)
class Mount:
    """One resolved read-only mount: the host directory and its path inside."""

    source: Path
    target: str


def resolve_mounts(mounts: tuple[str, ...] | list[str], roots: list[str]) -> list[Mount]:
    """``mounts`` resolved and checked against ``roots`` (also resolved). Raises
    ``MountRefused`` naming the entry when one is missing or escapes every root."""
    allowed = [Path(r).resolve() for r in roots]
    out: list[Mount] = []
    seen: set[str] = set()
    for entry in mounts:
        real = Path(entry).resolve()
        if not any(real == root or real.is_relative_to(root) for root in allowed):
            raise MountRefused(f"mount {entry!r} resolves to {str(real)!r}, outside every "
                               "[tools] mount_roots entry")
        if not real.is_dir():
            raise MountRefused(f"mount {entry!r} is not a directory")
        target = f"{MOUNTS_INSIDE}/{real.name or 'root'}"
        if target in seen:
            raise MountRefused(f"two mounts would both appear at {target}")
        seen.add(target)
        out.append(Mount(real, target))
    return out

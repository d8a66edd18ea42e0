"""Crash-safe file writes: temp file in the same directory, fsync, rename, fsync dir."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never a mix.

    With ``durable`` the data and the rename are fsynced, so the new content survives a
    power cut once this returns.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def fsync_dir(directory: Path) -> None:
    """Make a rename/unlink inside ``directory`` durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_regular(path: Path) -> bytes:
    """The bytes of ``path``, refusing to follow a symlink (which could point outside
    the group directory). Raises ``FileNotFoundError`` for a link or a missing file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ELOOP, errno.EMLINK):
            raise FileNotFoundError(str(path)) from None
        raise
    with os.fdopen(fd, "rb") as fh:
        return fh.read()

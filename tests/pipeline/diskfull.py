"""A small filesystem for disk-full tests: a tmpfs the test mounts (root, as in CI),
and a filler file that takes every free byte until it is removed."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``16m``) mounted at ``where``; skips the test when this
    process may not mount one (not root, or a container without CAP_SYS_ADMIN)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        # lazy: a server the test could not stop in time must not fail the unmount
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextlib.contextmanager
def fill(disk: Path) -> Iterator[Path]:
    """Fill ``disk`` to the last byte with one file; yields its path (unlink it to free
    the space), removed at exit in any case."""
    filler = disk / "filler"
    block = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
        # the last partial block: fill the remainder byte-wise in smaller writes
        for size in (4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(block[:size])
    try:
        yield filler
    finally:
        with contextlib.suppress(FileNotFoundError):
            filler.unlink()

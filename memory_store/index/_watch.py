"""Cheap change detection for the memory directories.

The index must reflect hand edits on the next search, but stat-ing every file costs
about 3.5 µs each (35 ms at 10k files, seconds at a million), too much per search. On
Linux inotify watching the memory directories and their sub-folders (the monthly
episode shards) tells exactly which files changed, at the cost of one non-blocking read
per search. Elsewhere (or when inotify is unavailable, e.g. out of watches) the poller
asks for a full mtime+size scan every time, which is always correct, only slower.

A process that keeps many groups open (a worker) shares one :class:`Inotify` instance
among their watchers: the kernel allows few instances per user
(``fs.inotify.max_user_instances``, 128 by default, shared by every process of the user),
so one per group ran out at a few workers times a few dozen groups. Watches are limited
separately (``fs.inotify.max_user_watches``, 8192 on older kernels, scaled with RAM on
newer ones) and a watch is not recursive: a group takes one per memory folder and one
per shard. A group whose watches cannot be added falls back to polling, alone.

Network file systems do not deliver inotify events for remote writers, so every
``check_interval`` seconds the watcher also stats the folders themselves (a few dozen,
not a million files) and reports each folder whose mtime moved: the catalog rescans
only those. A file created, deleted or renamed into place (every write of this package,
and most editors' saves) moves its folder's mtime; an in-place rewrite by a remote
writer does not, and is caught by ``pynanoclaw memory reindex``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import struct
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_ISDIR = 0x40000000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO
         | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF)
_RESCAN = _IN_Q_OVERFLOW | _IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF
_EVENT = struct.Struct("iIII")
#: events kept for one watcher between its polls; past that it rescans everything (a
#: group left open but unsearched while thousands of its files changed)
_MAX_PENDING = 4096

_Event = tuple[int, int, bytes]


class Watcher(Protocol):
    def poll(self) -> set[Path] | None:
        """Memory files (or folders, to rescan whole) that may have changed since the
        last poll, or None: scan all."""

    def force_full(self) -> None:
        """Make the next poll ask for a full scan (after a failed or partial sync)."""

    def close(self) -> None: ...


class PollingWatcher:
    """Always asks for a full scan: correct everywhere, O(files) per search."""

    def poll(self) -> set[Path] | None:
        return None

    def force_full(self) -> None:
        return None

    def close(self) -> None:
        return None


class Inotify:
    """One inotify instance, shared by the watchers of every group a process keeps open.

    Each event read is handed to the watchers of its watch descriptor (two watchers of
    the same folder share one descriptor: the kernel gives the same one back); a queue
    overflow goes to all. Whoever polls reads for everyone, so no group's events wait in
    the kernel's queue (``fs.inotify.max_queued_events``) for that group's next search.
    Thread-safe; close it after the watchers (the worker context owns it).
    """

    def __init__(self) -> None:
        libc_name = ctypes.util.find_library("c")
        self._libc = ctypes.CDLL(libc_name, use_errno=True)
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1 failed: {os.strerror(err)}")
        self._fd: int | None = fd
        # a forked child shares the instance with its parent: it must not read the
        # parent's events nor remove its watches (dropping the parent's watchers does)
        self._pid = os.getpid()
        # weak: a watcher dropped without close() must not be kept alive (and watched)
        # by the instance; its __del__ gives its watches back
        self._subs: dict[int, weakref.WeakSet[InotifyWatcher]] = {}
        self._mu = threading.RLock()  # RLock: a watcher's __del__ may run mid-dispatch

    @property
    def closed(self) -> bool:
        return self._fd is None or self._pid != os.getpid()

    def watches(self) -> int:
        """Watch descriptors in use (what counts against ``max_user_watches``)."""
        with self._mu:
            return len(self._subs)

    def add(self, d: Path, watcher: InotifyWatcher) -> int:
        """Watch folder ``d`` for ``watcher``; returns the watch descriptor."""
        with self._mu:
            if self.closed:
                raise OSError(0, "inotify instance closed (or a parent's)")
            wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(d), _MASK))
            if wd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"inotify_add_watch({d}) failed: {os.strerror(err)}")
            self._subs.setdefault(wd, weakref.WeakSet()).add(watcher)
            return wd

    def drop(self, wd: int, watcher: InotifyWatcher) -> None:
        """``watcher`` no longer needs ``wd``; the kernel's watch goes with its last
        user."""
        with self._mu:
            subs = self._subs.get(wd)
            if subs is None:
                return
            subs.discard(watcher)
            if len(subs) == 0:
                del self._subs[wd]
                if not self.closed:
                    # fails (EINVAL) only when the kernel dropped it already (folder gone)
                    self._libc.inotify_rm_watch(self._fd, wd)

    def events_for(self, watcher: InotifyWatcher) -> list[_Event]:
        """Read what the kernel has, and return ``watcher``'s events since its last
        call."""
        with self._mu:
            self._pump()
            events, watcher._events = watcher._events, []
            return events

    def _pump(self) -> None:
        """Read every pending event and hand it to its watchers."""
        with self._mu:
            fd = self._fd
            if fd is None or self.closed:
                return
            while True:
                try:
                    buf = os.read(fd, 65536)
                except BlockingIOError:
                    break
                off = 0
                while off + _EVENT.size <= len(buf):
                    wd, mask, _cookie, length = _EVENT.unpack_from(buf, off)
                    off += _EVENT.size
                    name = buf[off : off + length].rstrip(b"\0")
                    off += length
                    if mask & _IN_Q_OVERFLOW:
                        targets = {w for subs in list(self._subs.values()) for w in subs}
                    else:
                        targets = set(self._subs.get(wd, ()))
                    for w in targets:
                        w._deliver((wd, mask, name))
                    if mask & _IN_IGNORED:
                        self._subs.pop(wd, None)  # the kernel removed that watch

    def close(self) -> None:
        with self._mu:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._subs.clear()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            self._fd = None


class InotifyWatcher:
    """Reports changed ``*.md`` files (and new or moved sub-folders, as folder paths to
    rescan) under a fixed set of directories (Linux only), through ``inotify`` (shared),
    or an instance of its own when none is given."""

    def __init__(self, dirs: list[Path], check_interval: float = 60.0,
                 inotify: Inotify | None = None) -> None:
        self._own = inotify is None
        self._inotify: Inotify | None = Inotify() if inotify is None else inotify
        self._dirs = list(dirs)
        self._wd: dict[int, Path] = {}
        self._mtimes: dict[Path, int] = {}
        self._events: list[_Event] = []
        self._interval = check_interval
        self._last_check = time.monotonic()
        self._need_full = True
        try:
            self._add_watches()
        except OSError:
            self.close()  # give back the watches taken so far
            raise

    def _deliver(self, event: _Event) -> None:
        # called by the instance, under its lock
        if len(self._events) < _MAX_PENDING:
            self._events.append(event)
        else:
            self._events = [(-1, _IN_Q_OVERFLOW, b"")]

    def _watch(self, d: Path) -> None:
        assert self._inotify is not None
        wd = self._inotify.add(d, self)
        self._wd[wd] = d
        with contextlib.suppress(FileNotFoundError):
            self._mtimes[d] = os.stat(d).st_mtime_ns

    def _add_watches(self) -> None:
        old = set(self._wd)
        self._wd.clear()
        self._mtimes.clear()
        try:
            for d in self._dirs:
                d.mkdir(parents=True, exist_ok=True)
                self._watch(d)
                for sub in sorted(subdirs(d)):
                    self._watch(sub)
        finally:
            assert self._inotify is not None
            for wd in old - self._wd.keys():  # folders gone since
                self._inotify.drop(wd, self)

    def poll(self) -> set[Path] | None:
        if self._inotify is None or self._inotify.closed:
            return None  # closed (or the shared instance was): full scans
        changed: set[Path] = set()
        rescan = False
        for wd, mask, name in self._inotify.events_for(self):
            base = self._wd.get(wd)
            if mask & _RESCAN:
                # The queue overflowed or a watched top directory vanished: rescan
                # everything. A vanished shard is one folder to rescan.
                if not mask & _IN_Q_OVERFLOW:
                    if base is None:
                        continue
                    if base not in self._dirs:
                        changed.add(base)
                        self._wd.pop(wd, None)
                        continue
                rescan = True
                continue
            if base is None or not name:
                continue
            fname = os.fsdecode(name)
            if mask & _IN_ISDIR:
                if base in self._dirs and not fname.startswith("."):
                    # A new shard: watch it, then rescan it (files may have landed
                    # before the watch existed).
                    sub = base / fname
                    with contextlib.suppress(OSError):
                        if mask & (_IN_CREATE | _IN_MOVED_TO):
                            self._watch(sub)
                    changed.add(sub)
                continue
            if fname.endswith(".md") and not fname.startswith("."):
                changed.add(base / fname)
        now = time.monotonic()
        if rescan:
            try:
                self._add_watches()
            except OSError as exc:
                log.warning("inotify re-watch failed (%s); falling back to full scans", exc)
                self.close()
        if rescan or self._need_full:
            self._need_full = False
            self._last_check = now
            return None
        if now - self._last_check > self._interval:
            self._last_check = now
            changed.update(self._moved_dirs())
        return changed

    def _moved_dirs(self) -> set[Path]:
        """Watched folders whose mtime changed since they were last seen."""
        moved: set[Path] = set()
        for d in list(self._wd.values()):
            try:
                mtime = os.stat(d).st_mtime_ns
            except FileNotFoundError:
                moved.add(d)
                continue
            if self._mtimes.get(d) != mtime:
                self._mtimes[d] = mtime
                moved.add(d)
        return moved

    def force_full(self) -> None:
        self._need_full = True

    def close(self) -> None:
        """Give back the watches (and close the instance if it is this watcher's own).
        Polls then ask for full scans."""
        inotify, self._inotify = self._inotify, None
        if inotify is None:
            return
        if self._own:
            inotify.close()
        else:
            for wd in self._wd:
                inotify.drop(wd, self)
        self._wd.clear()

    def __del__(self) -> None:
        # A Memory dropped without close() must not leak its watches or its instance:
        # the per-user limits are small (fs.inotify.max_user_instances, often 128).
        with contextlib.suppress(Exception):
            self.close()


def subdirs(d: Path) -> list[Path]:
    """The visible sub-folders of ``d`` (shards); symlinks are not followed."""
    try:
        return [Path(e.path) for e in os.scandir(d)
                if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
    except FileNotFoundError:
        return []


def make_watcher(dirs: list[Path], mode: str = "auto", inotify: Inotify | None = None
                 ) -> Watcher:
    """``auto``: inotify on Linux, else polling; ``poll``: always full scans. With
    ``inotify`` the watches go on that shared instance, else on one of the watcher's
    own."""
    if mode not in {"auto", "inotify", "poll"}:
        raise ValueError(f"watch mode must be auto|inotify|poll, got {mode!r}")
    if mode == "poll" or (mode == "auto" and not sys.platform.startswith("linux")):
        return PollingWatcher()
    try:
        return InotifyWatcher(dirs, inotify=inotify)
    except (OSError, AttributeError) as exc:
        if mode == "inotify":
            raise
        log.warning("inotify unavailable (%s); memory index will poll files", exc)
        return PollingWatcher()


def make_inotify() -> Inotify | None:
    """An instance for a process to share among its groups' watchers, or None where
    inotify is unavailable (each group then tries its own, and else polls)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return Inotify()
    except (OSError, AttributeError) as exc:
        log.warning("inotify unavailable (%s); memory indexes will poll files", exc)
        return None

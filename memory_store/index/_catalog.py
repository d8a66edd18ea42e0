"""The derived index of one group: SQLite in ``.index/catalog.sqlite3``.

One row per memory file (id, path, filterable fields, mtime/size/hash, the parsed record
as JSON) plus an FTS5 table (Porter stemmer, BM25). Other indexes (the dense vectors)
plug in as :class:`IndexHook` and receive every change in the same transaction.

The files are the truth. :meth:`Catalog.refresh` brings the index up to date: changed
files (or folders) come from the watcher (inotify), else a full mtime+size scan, done
one folder at a time (``episodes/`` holds one sub-folder per month) so memory stays
flat at a million files; a file whose mtime or size differ is hashed and re-parsed
only when its bytes changed. Deleting ``.index/`` makes the next refresh rebuild
everything. The read side lives in :mod:`memory_store.index._catalog_query`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from memory_store._protocol import MemoryRecord
from memory_store.files._atomic import read_regular
from memory_store.files._fileformat import content_hash, parse_memory_file
from memory_store.files._group import GroupDirectory
from memory_store.files._paths import DEFAULT_KIND_DIR, KIND_DIRS, MEMORY_DIRS, id_from_filename
from memory_store.index._catalog_query import CatalogQueries
from memory_store.index._catalog_schema import DB_NAME, SCHEMA, SCHEMA_VERSION
from memory_store.index._indexdoc import index_text, record_from_json, record_to_json
from memory_store.index._watch import Inotify, Watcher, make_watcher, subdirs
from memory_store.ranking._lexplan import LexicalPlanner

__all__ = ["Catalog", "IndexHook", "Progress", "record_from_json", "record_to_json"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total)

_DIR_KIND = {v: k for k, v in reversed(list(KIND_DIRS.items()))}
_DIR_KIND[DEFAULT_KIND_DIR] = "note"


class IndexHook(Protocol):
    """A secondary index kept in step with the catalog (e.g. dense vectors)."""

    def attach(self, conn: sqlite3.Connection) -> None:
        """Create tables if needed and load state from ``conn``."""

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        """Index ``(rowid, record)`` pairs and drop ``deletes``, inside the open
        transaction. A rowid may be in both (SQLite gave a deleted last rowid again):
        the delete comes first."""

    def committed(self) -> None:
        """The transaction that carried the last ``apply`` committed."""

    def rolled_back(self, conn: sqlite3.Connection) -> None:
        """The transaction failed: reload state from ``conn``."""


@dataclass(frozen=True)
class Row:
    rowid: int
    id: str
    path: str
    mtime_ns: int
    size: int
    hash: str

    def stale(self, st: os.stat_result) -> bool:
        """Whether the file's mtime or size moved since this row was written."""
        return self.mtime_ns != st.st_mtime_ns or self.size != st.st_size


#: the columns a :class:`Row` is built from
_ROW = "SELECT rowid, id, path, mtime_ns, size, hash FROM docs"


def _delete(conn: sqlite3.Connection, rowid: int) -> None:
    conn.execute("DELETE FROM docs WHERE rowid=?", (rowid,))
    conn.execute("DELETE FROM fts WHERE rowid=?", (rowid,))


class Catalog(CatalogQueries):
    """The SQLite index of one group directory. Thread-safe within a process."""

    def __init__(self, group: GroupDirectory, *, hooks: Iterable[IndexHook] = (),
                 watch: str = "auto", inotify: Inotify | None = None) -> None:
        self.group = group
        self.hooks = list(hooks)
        self._mu = threading.RLock()
        self.planner = LexicalPlanner()
        group.ensure()
        self._watcher: Watcher = make_watcher([group.path / d for d in MEMORY_DIRS], watch,
                                              inotify=inotify)
        self._conn: sqlite3.Connection | None = None
        self._db_ino: int | None = None
        self._data_version: int | None = None
        self._open()

    # -- connection ---------------------------------------------------------------

    @property
    def db_path(self) -> Path:
        return self.group.index_dir / DB_NAME

    @property
    def lock(self) -> threading.RLock:
        """Held around every use of :attr:`conn` (secondary indexes take it too)."""
        return self._mu

    @property
    def conn(self) -> sqlite3.Connection:
        assert self._conn is not None, "catalog is closed"
        return self._conn

    def _open(self) -> None:
        self.group.index_dir.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False,
                               timeout=30.0)
        conn.execute("PRAGMA journal_mode=WAL")
        # The index is a cache of the files: losing its last commits on power loss only
        # costs a rescan, so skip the per-commit fsync.
        conn.execute("PRAGMA synchronous=NORMAL")
        # Deleted and replaced rows are overwritten with zeros as they go, so a redaction
        # leaves none of the removed words in the database file without a VACUUM (a
        # rewrite of the whole index: minutes at a million records, under the group lock).
        conn.execute("PRAGMA secure_delete=ON")
        # An index written by another version is dropped before this version's schema
        # runs against it (which could fail on a missing column): it is a cache of the
        # files, rebuilt by the rescan below.
        try:
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.OperationalError:  # no meta table: a new file
            row = None
        version = None if row is None else str(row[0])
        if version is not None and version != SCHEMA_VERSION:
            conn.close()
            self._drop_db()
            return self._open()
        conn.executescript(SCHEMA)
        if version is None:
            conn.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (SCHEMA_VERSION,))
        self._conn = conn
        self._db_ino = os.stat(self.db_path).st_ino
        self._data_version = self._pragma_data_version()
        for hook in self.hooks:
            hook.attach(conn)
        self._watcher.force_full()
        return None

    def _drop_db(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.db_path) + suffix)

    def _pragma_data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def _close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._mu:
            self._close_conn()
            self._watcher.close()

    def _check_db(self) -> None:
        """Reopen (and so rebuild) when someone deleted or replaced ``.index/``."""
        try:
            ino: int | None = os.stat(self.db_path).st_ino
        except FileNotFoundError:
            ino = None
        if ino != self._db_ino:
            log.info("index of %s vanished; rebuilding from files", self.group.group)
            self._close_conn()
            self._open()
            return
        version = self._pragma_data_version()
        if version != self._data_version:
            # Another process committed: secondary indexes held in RAM must reload.
            self._data_version = version
            for hook in self.hooks:
                hook.attach(self.conn)

    # -- sync with the files --------------------------------------------------------

    def refresh(self, progress: Progress | None = None, *, full: bool = False) -> int:
        """Make the index match the files; returns the number of records (re)indexed or
        dropped."""
        with self._mu:
            self._check_db()
            changed = self._watcher.poll()
            if full:
                changed = None
            try:
                if changed is None:
                    return self._full_scan(progress)
                if changed:
                    return self._sync_paths(changed, progress)
                return 0
            except BaseException:
                self._watcher.force_full()
                raise

    def rebuild(self, progress: Progress | None = None) -> int:
        """Drop the index and rebuild it from the files; returns the records indexed."""
        with self._mu:
            self._close_conn()
            self._drop_db()
            self._open()
            return self.refresh(progress, full=True)

    def _dirs(self) -> list[str]:
        """Every folder that may hold memory files: the memory dirs and their shards."""
        out: list[str] = []
        for sub in MEMORY_DIRS:
            top = self.group.path / sub
            out.append(sub)
            out.extend(self.group.rel(d) for d in sorted(subdirs(top)))
        return out

    def _full_scan(self, progress: Progress | None) -> int:
        """Compare every folder with its rows, one folder (and transaction) at a time."""
        dirs = self._dirs()
        changed = 0
        for i, rel_dir in enumerate(dirs):
            changed += self._scan_dir(rel_dir)
            if progress is not None:
                progress(i + 1, len(dirs))
        known = {r[0] for r in self.conn.execute("SELECT DISTINCT dir FROM docs")}
        for gone in sorted(known - set(dirs)):
            changed += self._scan_dir(gone)
        return changed

    def _scan_dir(self, rel_dir: str) -> int:
        rows = {r[2]: Row(*r) for r in self.conn.execute(f"{_ROW} WHERE dir=?", (rel_dir,))}
        seen: set[str] = set()
        candidates: list[tuple[str, os.stat_result]] = []
        try:
            entries = list(os.scandir(self.group.path / rel_dir))
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        for entry in entries:
            name = entry.name
            # Symlinks are skipped: a link could point outside the group directory.
            if (not name.endswith(".md") or name.startswith(".")
                    or not entry.is_file(follow_symlinks=False)):
                continue
            rel = f"{rel_dir}/{name}"
            seen.add(rel)
            st = entry.stat(follow_symlinks=False)
            row = rows.get(rel)
            if row is None or row.stale(st):
                candidates.append((rel, st))
        deletes = [row for rel, row in rows.items() if rel not in seen]
        return self._apply(candidates, deletes, rows, None)

    def _sync_paths(self, paths: set[Path], progress: Progress | None) -> int:
        candidates: list[tuple[str, os.stat_result]] = []
        deletes: list[Row] = []
        rows: dict[str, Row] = {}
        changed = 0
        for path in paths:
            rel = self.group.rel(path)
            if not rel.endswith(".md"):  # a folder (new, moved or touched shard)
                changed += self._scan_dir(rel)
                continue
            r = self.conn.execute(f"{_ROW} WHERE path=?", (rel,)).fetchone()
            row = Row(*r) if r else None
            if row is not None:
                rows[rel] = row
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode):
                if row is not None:
                    deletes.append(row)
                continue
            if row is None or row.stale(st):
                candidates.append((rel, st))
        return changed + self._apply(candidates, deletes, rows, progress)

    def _apply(self, candidates: list[tuple[str, os.stat_result]], deletes: list[Row],
               rows: dict[str, Row], progress: Progress | None) -> int:
        if not candidates and not deletes:
            return 0
        upserts: list[tuple[int, MemoryRecord]] = []
        dropped = [row.rowid for row in deletes]
        total = len(candidates) + len(deletes)
        with self.write_txn() as conn:
            for gone in dropped:
                _delete(conn, gone)
            for i, (rel, st) in enumerate(candidates):
                if progress is not None and i % 256 == 0:
                    progress(len(deletes) + i, total)
                old = rows.get(rel)
                try:
                    data = read_regular(self.group.path / rel)
                except FileNotFoundError:
                    if old is not None:
                        _delete(conn, old.rowid)
                        dropped.append(old.rowid)
                    continue
                digest = content_hash(data)
                if old is not None and old.hash == digest:
                    conn.execute("UPDATE docs SET mtime_ns=?, size=? WHERE rowid=?",
                                 (st.st_mtime_ns, st.st_size, old.rowid))
                    continue
                record = self._parse_file(rel, data, st)
                rowid = self._upsert(rel, record, digest, st.st_mtime_ns, st.st_size, dropped)
                if rowid is not None:
                    upserts.append((rowid, record))
            for hook in self.hooks:
                hook.apply(conn, upserts, dropped, progress)
        if progress is not None:
            progress(total, total)
        return len(upserts) + len(dropped)

    @contextlib.contextmanager
    def write_txn(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: hooks roll back with it and hear of its commit."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as err:
            if conn.in_transaction:  # SQLITE_FULL may have rolled back already
                conn.execute("ROLLBACK")
            for hook in self.hooks:
                hook.rolled_back(conn)
            if isinstance(err, sqlite3.OperationalError) and \
                    err.sqlite_errorcode == sqlite3.SQLITE_FULL:
                # one cause for a full disk whoever hit it first: the turn is retried
                # once space is back, never dead-lettered for it (workers/turn.py)
                raise OSError(errno.ENOSPC, "database or disk is full") from err
            raise
        self._data_version = self._pragma_data_version()
        for hook in self.hooks:
            hook.committed()

    def _parse_file(self, rel: str, data: bytes, st: os.stat_result) -> MemoryRecord:
        sub, name = rel.split("/", 1)[0], rel.rsplit("/", 1)[-1]
        mtime = datetime.fromtimestamp(st.st_mtime, UTC)
        return parse_memory_file(data.decode("utf-8", errors="replace"),
                                 fallback_id=id_from_filename(name),
                                 fallback_kind=_DIR_KIND.get(sub, "note"), mtime=mtime)

    def _upsert(self, rel: str, record: MemoryRecord, digest: str, mtime_ns: int,
                size: int, dropped: list[int]) -> int | None:
        """Insert or replace the row for ``rel``; None when the id belongs to another
        live file (a hand-made copy), which is then left out of the index. The row of a
        vanished file with the same id (a file moved between folders) is deleted and
        its rowid added to ``dropped``, for the hooks: its folder may be scanned later
        or never, and would then find no row to drop."""
        conn = self.conn
        other = conn.execute("SELECT rowid, path FROM docs WHERE id=?", (record.id,)).fetchone()
        if other is not None and other[1] != rel:
            if (self.group.path / other[1]).exists():
                log.warning("memory id %r in %s already used by %s; skipping the copy",
                            record.id, rel, other[1])
                return None
            _delete(conn, other[0])
            dropped.append(int(other[0]))
        values = (
            record.id, rel, rel.rsplit("/", 1)[0], record.kind, record.source,
            record.created.timestamp(), record.updated.timestamp(), record.trust,
            record.valid_from.timestamp() if record.valid_from else None,
            record.valid_to.timestamp() if record.valid_to else None,
            json.dumps(list(record.tags)), mtime_ns, size, digest, record_to_json(record),
        )
        existing = conn.execute("SELECT rowid FROM docs WHERE path=?", (rel,)).fetchone()
        if existing is not None:
            rowid = int(existing[0])
            conn.execute(
                "UPDATE docs SET id=?, path=?, dir=?, kind=?, source=?, created=?, updated=?,"
                " trust=?, valid_from=?, valid_to=?, tags=?, mtime_ns=?, size=?, hash=?, record=?"
                " WHERE rowid=?", (*values, rowid))
            conn.execute("DELETE FROM fts WHERE rowid=?", (rowid,))
        else:
            cur = conn.execute(
                "INSERT INTO docs(id, path, dir, kind, source, created, updated, trust,"
                " valid_from, valid_to, tags, mtime_ns, size, hash, record)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", values)
            assert cur.lastrowid is not None
            rowid = int(cur.lastrowid)
        conn.execute("INSERT INTO fts(rowid, text) VALUES(?, ?)", (rowid, index_text(record)))
        return rowid

    def index_written(self, rel: str, record: MemoryRecord, data: bytes) -> None:
        """Index a file this process just wrote (caller holds the group lock)."""
        st = os.stat(self.group.path / rel)
        with self._mu:
            self._check_db()
            with self.write_txn() as conn:
                dropped: list[int] = []
                rowid = self._upsert(rel, record, content_hash(data), st.st_mtime_ns,
                                     st.st_size, dropped)
                upserts = [] if rowid is None else [(rowid, record)]
                for hook in self.hooks:
                    hook.apply(conn, upserts, dropped, None)

    def index_removed(self, rel: str) -> None:
        """Drop the row of a file this process just deleted (caller holds the lock)."""
        with self._mu:
            self._check_db()
            r = self.conn.execute("SELECT rowid FROM docs WHERE path=?", (rel,)).fetchone()
            if r is None:
                return
            with self.write_txn() as conn:
                _delete(conn, r[0])
                for hook in self.hooks:
                    hook.apply(conn, [], [int(r[0])], None)

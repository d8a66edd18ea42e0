"""The derived index of one group: SQLite in ``.index/catalog.sqlite3``.

One row per memory file (id, path, filterable fields, mtime/size/hash, the parsed record
as JSON) plus an FTS5 table (Porter stemmer, BM25). Other indexes (the dense vectors)
plug in as :class:`IndexHook` and receive every change in the same transaction.

The files are the truth. :meth:`Catalog.refresh` brings the index up to date: changed
files come from the watcher (inotify) or a full mtime+size scan; a file whose mtime or
size differ is hashed and re-parsed only when its bytes changed. Deleting ``.index/``
makes the next refresh rebuild everything.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from memory_store.atomic import read_regular
from memory_store.fileformat import content_hash, parse, to_datetime
from memory_store.filters import SearchFilters
from memory_store.group import GroupDirectory
from memory_store.paths import DEFAULT_KIND_DIR, KIND_DIRS, MEMORY_DIRS, id_from_filename
from memory_store.protocol import MemoryRecord
from memory_store.stopwords import STOPWORDS
from memory_store.watch import Watcher, make_watcher

log = logging.getLogger(__name__)

DB_NAME = "catalog.sqlite3"
SCHEMA_VERSION = "1"
Progress = Callable[[int, int], None]  # (done, total)

_DIR_KIND = {v: k for k, v in reversed(list(KIND_DIRS.items()))}
_DIR_KIND[DEFAULT_KIND_DIR] = "note"
_WORD = re.compile(r"\w+", re.UNICODE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS docs(
  rowid INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  path TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL,
  source TEXT NOT NULL,
  created REAL NOT NULL,
  updated REAL NOT NULL,
  trust REAL NOT NULL,
  valid_from REAL,
  valid_to REAL,
  tags TEXT NOT NULL,
  mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL,
  hash TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_created ON docs(created);
CREATE INDEX IF NOT EXISTS docs_valid_to ON docs(valid_to) WHERE valid_to IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
  text, tokenize = 'porter unicode61 remove_diacritics 2'
);
"""


class IndexHook(Protocol):
    """A secondary index kept in step with the catalog (e.g. dense vectors)."""

    def attach(self, conn: sqlite3.Connection) -> None:
        """Create tables if needed and load state from ``conn``."""

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        """Index ``(rowid, record)`` pairs and drop ``deletes``, inside the open
        transaction."""

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


def record_to_json(record: MemoryRecord) -> str:
    def iso(dt: datetime | None) -> str | None:
        return None if dt is None else dt.isoformat()

    return json.dumps({
        "id": record.id, "kind": record.kind, "content": record.content,
        "source": record.source, "created": iso(record.created),
        "updated": iso(record.updated), "trust": record.trust,
        "valid_from": iso(record.valid_from), "valid_to": iso(record.valid_to),
        "tags": list(record.tags), "metadata": record.metadata,
    }, ensure_ascii=False, default=str)


def record_from_json(text: str, score: float = 0.0) -> MemoryRecord:
    d = json.loads(text)
    created = to_datetime(d["created"])
    updated = to_datetime(d["updated"])
    assert created is not None and updated is not None
    return MemoryRecord(
        id=d["id"], kind=d["kind"], content=d["content"], source=d["source"],
        created=created, updated=updated, trust=float(d["trust"]),
        valid_from=to_datetime(d["valid_from"]), valid_to=to_datetime(d["valid_to"]),
        tags=tuple(d["tags"]), metadata=d["metadata"], score=score,
    )


def index_text(record: MemoryRecord) -> str:
    """What lexical and dense indexes see: the body plus who, what about, and when.

    Names and the date are appended because questions name people and times ("what did
    Caroline do in May 2023?") that the body of a turn often leaves implicit.
    """
    extra: list[str] = []
    meta = record.metadata
    for key in ("speaker", "entity", "title"):
        value = meta.get(key)
        if isinstance(value, str) and value not in record.content:
            extra.append(value)
    participants = meta.get("participants")
    if isinstance(participants, list):
        extra.extend(str(p) for p in participants if str(p) not in record.content)
    extra.extend(record.tags)
    extra.append(f"{record.created.day} {record.created.strftime('%B %Y')}")
    return record.content + "\n" + " ".join(extra)


def fts_query(query: str) -> str | None:
    """An FTS5 OR-query of the query's content words (stopwords dropped), or None."""
    words = [w.lower() for w in _WORD.findall(query)]
    content = [w for w in words if w not in STOPWORDS]
    chosen = content or words
    if not chosen:
        return None
    unique = list(dict.fromkeys(chosen))
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in unique)


class Catalog:
    """The SQLite index of one group directory. Thread-safe within a process."""

    def __init__(self, group: GroupDirectory, *, hooks: Iterable[IndexHook] = (),
                 watch: str = "auto") -> None:
        self.group = group
        self.hooks = list(hooks)
        self._mu = threading.RLock()
        group.ensure()
        self._watcher: Watcher = make_watcher([group.path / d for d in MEMORY_DIRS], watch)
        self._conn: sqlite3.Connection | None = None
        self._db_ino: int | None = None
        self._data_version: int | None = None
        self._open()

    # -- connection ---------------------------------------------------------------

    @property
    def db_path(self) -> Path:
        return self.group.index_dir / DB_NAME

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
        conn.executescript(_SCHEMA)
        version = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if version is None:
            conn.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (SCHEMA_VERSION,))
        elif version[0] != SCHEMA_VERSION:
            conn.close()
            self._drop_db()
            return self._open()
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

    def close(self) -> None:
        with self._mu:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._watcher.close()

    def _check_db(self) -> None:
        """Reopen (and so rebuild) when someone deleted or replaced ``.index/``."""
        try:
            ino: int | None = os.stat(self.db_path).st_ino
        except FileNotFoundError:
            ino = None
        if ino != self._db_ino:
            log.info("index of %s vanished; rebuilding from files", self.group.group)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
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
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._drop_db()
            self._open()
            return self.refresh(progress, full=True)

    def _rows_by_path(self) -> dict[str, Row]:
        return {r[2]: Row(*r) for r in self.conn.execute(
            "SELECT rowid, id, path, mtime_ns, size, hash FROM docs")}

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.group.path).as_posix()

    def _full_scan(self, progress: Progress | None) -> int:
        rows = self._rows_by_path()
        seen: set[str] = set()
        candidates: list[tuple[str, os.stat_result]] = []
        for sub in MEMORY_DIRS:
            try:
                entries = list(os.scandir(self.group.path / sub))
            except FileNotFoundError:
                continue
            for entry in entries:
                name = entry.name
                # Symlinks are skipped: a link could point outside the group directory.
                if (not name.endswith(".md") or name.startswith(".")
                        or not entry.is_file(follow_symlinks=False)):
                    continue
                rel = f"{sub}/{name}"
                seen.add(rel)
                st = entry.stat(follow_symlinks=False)
                row = rows.get(rel)
                if row is None or row.mtime_ns != st.st_mtime_ns or row.size != st.st_size:
                    candidates.append((rel, st))
        deletes = [row for rel, row in rows.items() if rel not in seen]
        return self._apply(candidates, deletes, rows, progress)

    def _sync_paths(self, paths: set[Path], progress: Progress | None) -> int:
        candidates: list[tuple[str, os.stat_result]] = []
        deletes: list[Row] = []
        rows: dict[str, Row] = {}
        for path in paths:
            rel = self._rel(path)
            r = self.conn.execute(
                "SELECT rowid, id, path, mtime_ns, size, hash FROM docs WHERE path=?", (rel,)
            ).fetchone()
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
            if row is None or row.mtime_ns != st.st_mtime_ns or row.size != st.st_size:
                candidates.append((rel, st))
        return self._apply(candidates, deletes, rows, progress)

    def _apply(self, candidates: list[tuple[str, os.stat_result]], deletes: list[Row],
               rows: dict[str, Row], progress: Progress | None) -> int:
        if not candidates and not deletes:
            return 0
        changed = 0
        upserts: list[tuple[int, MemoryRecord]] = []
        dropped: list[int] = []
        total = len(candidates) + len(deletes)
        with self._write_txn() as conn:
            for row in deletes:
                conn.execute("DELETE FROM docs WHERE rowid=?", (row.rowid,))
                conn.execute("DELETE FROM fts WHERE rowid=?", (row.rowid,))
                dropped.append(row.rowid)
                changed += 1
            for i, (rel, st) in enumerate(candidates):
                if progress is not None and i % 256 == 0:
                    progress(len(deletes) + i, total)
                try:
                    data = read_regular(self.group.path / rel)
                except FileNotFoundError:
                    old = rows.get(rel)
                    if old is not None:
                        conn.execute("DELETE FROM docs WHERE rowid=?", (old.rowid,))
                        conn.execute("DELETE FROM fts WHERE rowid=?", (old.rowid,))
                        dropped.append(old.rowid)
                        changed += 1
                    continue
                digest = content_hash(data)
                old = rows.get(rel)
                if old is not None and old.hash == digest:
                    conn.execute("UPDATE docs SET mtime_ns=?, size=? WHERE rowid=?",
                                 (st.st_mtime_ns, st.st_size, old.rowid))
                    continue
                record = self._parse_file(rel, data, st)
                rowid = self._upsert(rel, record, digest, st.st_mtime_ns, st.st_size)
                if rowid is not None:
                    upserts.append((rowid, record))
                    changed += 1
            for hook in self.hooks:
                hook.apply(conn, upserts, dropped, progress)
        if progress is not None:
            progress(total, total)
        return changed

    @contextlib.contextmanager
    def _write_txn(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: hooks roll back with it and hear of its commit."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            for hook in self.hooks:
                hook.rolled_back(conn)
            raise
        self._data_version = self._pragma_data_version()
        for hook in self.hooks:
            hook.committed()

    def _parse_file(self, rel: str, data: bytes, st: os.stat_result) -> MemoryRecord:
        sub, _, name = rel.partition("/")
        mtime = datetime.fromtimestamp(st.st_mtime, UTC)
        return parse(data.decode("utf-8", errors="replace"), fallback_id=id_from_filename(name),
                     fallback_kind=_DIR_KIND.get(sub, "note"), mtime=mtime)

    def _upsert(self, rel: str, record: MemoryRecord, digest: str, mtime_ns: int,
                size: int) -> int | None:
        """Insert or replace the row for ``rel``; None when the id belongs to another
        live file (a hand-made copy), which is then left out of the index."""
        conn = self.conn
        other = conn.execute("SELECT rowid, path FROM docs WHERE id=?", (record.id,)).fetchone()
        if other is not None and other[1] != rel:
            if (self.group.path / other[1]).exists():
                log.warning("memory id %r in %s already used by %s; skipping the copy",
                            record.id, rel, other[1])
                return None
            conn.execute("DELETE FROM docs WHERE rowid=?", (other[0],))
            conn.execute("DELETE FROM fts WHERE rowid=?", (other[0],))
        values = (
            record.id, rel, record.kind, record.source, record.created.timestamp(),
            record.updated.timestamp(), record.trust,
            record.valid_from.timestamp() if record.valid_from else None,
            record.valid_to.timestamp() if record.valid_to else None,
            json.dumps(list(record.tags)), mtime_ns, size, digest, record_to_json(record),
        )
        existing = conn.execute("SELECT rowid FROM docs WHERE path=?", (rel,)).fetchone()
        if existing is not None:
            rowid = int(existing[0])
            conn.execute(
                "UPDATE docs SET id=?, path=?, kind=?, source=?, created=?, updated=?, trust=?,"
                " valid_from=?, valid_to=?, tags=?, mtime_ns=?, size=?, hash=?, record=?"
                " WHERE rowid=?", (*values, rowid))
            conn.execute("DELETE FROM fts WHERE rowid=?", (rowid,))
        else:
            cur = conn.execute(
                "INSERT INTO docs(id, path, kind, source, created, updated, trust, valid_from,"
                " valid_to, tags, mtime_ns, size, hash, record)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", values)
            assert cur.lastrowid is not None
            rowid = int(cur.lastrowid)
        conn.execute("INSERT INTO fts(rowid, text) VALUES(?, ?)", (rowid, index_text(record)))
        return rowid

    def index_written(self, rel: str, record: MemoryRecord, data: bytes) -> None:
        """Index a file this process just wrote (caller holds the group lock)."""
        st = os.stat(self.group.path / rel)
        with self._mu:
            self._check_db()
            with self._write_txn() as conn:
                rowid = self._upsert(rel, record, content_hash(data), st.st_mtime_ns,
                                     st.st_size)
                upserts = [] if rowid is None else [(rowid, record)]
                for hook in self.hooks:
                    hook.apply(conn, upserts, [], None)

    def index_removed(self, rel: str) -> None:
        """Drop the row of a file this process just deleted (caller holds the lock)."""
        with self._mu:
            self._check_db()
            conn = self.conn
            r = conn.execute("SELECT rowid FROM docs WHERE path=?", (rel,)).fetchone()
            if r is None:
                return
            with self._write_txn() as conn:
                conn.execute("DELETE FROM docs WHERE rowid=?", (r[0],))
                conn.execute("DELETE FROM fts WHERE rowid=?", (r[0],))
                for hook in self.hooks:
                    hook.apply(conn, [], [int(r[0])], None)

    # -- queries ----------------------------------------------------------------------

    def locate(self, memory_id: str) -> tuple[str, MemoryRecord] | None:
        """(relative path, record) of ``memory_id`` as last indexed, or None."""
        with self._mu:
            r = self.conn.execute("SELECT path, record FROM docs WHERE id=?",
                                  (memory_id,)).fetchone()
        return None if r is None else (r[0], record_from_json(r[1]))

    def count(self) -> int:
        with self._mu:
            return int(self.conn.execute("SELECT count(*) FROM docs").fetchone()[0])

    def lexical(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        """Top ``k`` (rowid, bm25 score; higher is better) matching ``query`` and filters."""
        match = fts_query(query)
        if match is None or k <= 0:
            return []
        if filters.only_superseded_check:
            return self._lexical_unfiltered(match, k, filters)
        where, params = filters.sql("d")
        sql = ("SELECT fts.rowid, bm25(fts) AS s FROM fts JOIN docs d ON d.rowid = fts.rowid"  # noqa: S608
               f" WHERE fts MATCH ? AND {where} ORDER BY s LIMIT ?")
        with self._mu:
            rows = self.conn.execute(sql, [match, *params, k]).fetchall()
        return [(int(r[0]), -float(r[1])) for r in rows]

    def _lexical_unfiltered(self, match: str, k: int,
                            filters: SearchFilters) -> list[tuple[int, float]]:
        """The common case (no filter but "not superseded"): rank in FTS alone, without
        the join to ``docs`` for every match, and drop the few superseded rows after."""
        with self._mu:
            gone: set[int] = set()
            if not filters.include_superseded:
                now = (filters.now.timestamp() if filters.now else 0.0)
                gone = {int(r[0]) for r in self.conn.execute(
                    "SELECT rowid FROM docs WHERE valid_to IS NOT NULL AND valid_to <= ?",
                    (now,))}
            rows = self.conn.execute(
                "SELECT rowid, bm25(fts) AS s FROM fts WHERE fts MATCH ? ORDER BY s LIMIT ?",
                (match, k + len(gone))).fetchall()
        return [(int(r[0]), -float(r[1])) for r in rows if int(r[0]) not in gone][:k]

    def recent(self, k: int, filters: SearchFilters) -> list[int]:
        where, params = filters.sql("d")
        with self._mu:
            rows = self.conn.execute(
                f"SELECT d.rowid FROM docs d WHERE {where} ORDER BY d.created DESC LIMIT ?",  # noqa: S608
                [*params, k]).fetchall()
        return [int(r[0]) for r in rows]

    def allowed(self, filters: SearchFilters) -> list[int]:
        """Every rowid passing ``filters``."""
        where, params = filters.sql("d")
        with self._mu:
            return [int(r[0]) for r in self.conn.execute(
                f"SELECT d.rowid FROM docs d WHERE {where}", params)]  # noqa: S608

    def signals(self, rowids: list[int]) -> dict[int, tuple[float, float]]:
        """rowid -> (created epoch seconds, trust) for ranking."""
        if not rowids:
            return {}
        out: dict[int, tuple[float, float]] = {}
        with self._mu:
            for chunk in _chunks(rowids, 500):
                q = f"SELECT rowid, created, trust FROM docs WHERE rowid IN ({_marks(chunk)})"  # noqa: S608
                for r in self.conn.execute(q, chunk):
                    out[int(r[0])] = (float(r[1]), float(r[2]))
        return out

    def records(self, rowids: list[int]) -> dict[int, MemoryRecord]:
        if not rowids:
            return {}
        out: dict[int, MemoryRecord] = {}
        with self._mu:
            for chunk in _chunks(rowids, 500):
                q = f"SELECT rowid, record FROM docs WHERE rowid IN ({_marks(chunk)})"  # noqa: S608
                for r in self.conn.execute(q, chunk):
                    out[int(r[0])] = record_from_json(r[1])
        return out

    def iter_records(
        self, filters: SearchFilters | None = None
    ) -> Iterator[tuple[str, MemoryRecord]]:
        """(relative path, record) of every indexed memory, oldest first."""
        where, params = (filters.sql("d") if filters else ("1", []))
        with self._mu:
            rows = self.conn.execute(
                f"SELECT d.path, d.record FROM docs d WHERE {where}"  # noqa: S608
                " ORDER BY d.created, d.rowid",
                params).fetchall()
        for path, rec in rows:
            yield path, record_from_json(rec)


def _marks(items: list[int]) -> str:
    return ",".join("?" * len(items))


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]

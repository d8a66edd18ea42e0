"""Names of the people who speak in a group, and the query without them for the model.

A question names people ("what does Ann do to relax?") that the dense model reads as
ordinary words: it then ranks turns that *mention* a name (someone addressing Ann) above
turns about the thing asked, and every "Ann: ..." turn looks alike on the name. The
hybrid backend keeps names in the BM25 query, where an exact name match is what BM25 is
good at, and embeds the question without them (:func:`without_names`), so the dense half
ranks by what is asked. Measured on LoCoMo's tuning conversation: ``bench/README.md``.

:class:`PeopleIndex` is an index hook: it learns names from the ``speaker`` and
``participants`` metadata of every record the catalog indexes (participants as written
by the workers, ``"Name (channel:id)"``: the part before the parenthesis) and keeps them
in a ``people`` table of the catalog, so opening a group reads a few rows, not every
record. Names are only added: someone who once spoke in the group stays a known name
after their turns are deleted (the table is rebuilt with the catalog).

It also keeps the records of each name, those the person spoke in and the entity facts
about them (a ``person_records`` table, and rowid arrays in RAM): a question that names
a person ("what does Ann do to relax?") asks about that person's own turns and facts,
so the hybrid backend gives them a prior (:meth:`PeopleIndex.records_of`).
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from memory_store._protocol import MemoryRecord
from memory_store.index._catalog import Progress
from memory_store.index._catalog_query import chunked, sql_marks
from memory_store.index._dense import grown
from memory_store.ranking._stopwords import STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)
_SCHEMA = "CREATE TABLE IF NOT EXISTS people(name TEXT PRIMARY KEY)"
_RECORDS = ("CREATE TABLE IF NOT EXISTS person_records(name TEXT NOT NULL,"
            " rowid INTEGER NOT NULL, PRIMARY KEY(name, rowid)) WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS person_records_rowid ON person_records(rowid)")
#: "telegram:42": a participant given by address only (the workers' fact attribution)
_ADDRESS = re.compile(r"[\w.-]+:\S+")
_PUNCT = ".,;:!?\"()[]\u201c\u201d\u2018\u2019'"
Rowids = npt.NDArray[np.int64]


def name_words(record: MemoryRecord) -> set[str]:
    """Lowercased words of the people a record names as its speaker or participants
    (one-letter words and stopwords left out: "Will" is too common a word)."""
    return _words(record.metadata.get("speaker"), record.metadata.get("participants"))


def owner_words(record: MemoryRecord) -> set[str]:
    """:func:`name_words` and the words of the entity a fact is about: whose record."""
    return name_words(record) | _words(record.metadata.get("entity"), None)


def _words(speaker: object, participants: object) -> set[str]:
    """The name words of ``speaker`` (a name, when a string) and ``participants``."""
    names: list[str] = []
    if isinstance(speaker, str):
        names.append(speaker)
    if isinstance(participants, list):
        names.extend(str(p).split(" (", 1)[0] for p in participants
                     if not _ADDRESS.fullmatch(str(p)))
    return {w for n in names for w in _WORD.findall(n.lower())
            if len(w) > 1 and w not in STOPWORDS and not w.isdigit()}


def named_in(query: str, names: frozenset[str]) -> set[str]:
    """The known name words ``query`` holds, possessives included ("Ann's" names Ann)."""
    bare = (t.lower().strip(_PUNCT).removesuffix("'s").removesuffix("\u2019s")
            for t in query.split())
    return {word for b in bare if (word := "".join(_WORD.findall(b))) in names}


def without_names(query: str, names: Iterable[str] | frozenset[str]) -> str:
    """``query`` without the whitespace-separated tokens that are a known name once
    punctuation is dropped ("Ann", "Ann?"; a possessive "Ann's" stays: it says whose),
    or ``query`` itself when nothing else would be left."""
    known = names if isinstance(names, frozenset) else frozenset(names)
    if not known:
        return query
    kept = [t for t in query.split() if "".join(_WORD.findall(t)).lower() not in known]
    return " ".join(kept) if kept else query


class _Rowids:
    """The rowids of one name's records: appended in place, read as a prefix (no lock
    needed to read: a reader sees the rows appended before it looked)."""

    def __init__(self, rowids: Rowids) -> None:
        self._buf = rowids
        self._n = len(rowids)

    def append(self, rowid: int) -> _Rowids:
        self._buf = grown(self._buf, max(16, self._n + 1), 0)
        self._buf[self._n] = rowid
        self._n += 1
        return self

    def rowids(self) -> Rowids:
        return self._buf[: self._n]


class PeopleIndex:
    """Known name words of one group and the records of each (see the module
    docstring); ``names`` and :meth:`records_of` are safe to use from any thread."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._known: set[str] = set()
        self._new: set[str] = set()
        self.names: frozenset[str] = frozenset()
        self._records: dict[str, _Rowids] = {}
        self._appended: list[tuple[int, set[str]]] = []
        self._reloaded: dict[str, Rowids] = {}

    def attach(self, conn: sqlite3.Connection) -> None:
        tables = {str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table'"
            " AND name IN ('people', 'person_records')")}
        if len(tables) < 2:
            # An index from before these tables: learn whose records it holds, once.
            rows: list[tuple[str, int]] = []
            found: set[str] = set()
            for rowid, speaker, participants, entity in conn.execute(
                    "SELECT rowid, json_extract(record, '$.metadata.speaker'),"
                    " json_extract(record, '$.metadata.participants'),"
                    " json_extract(record, '$.metadata.entity') FROM docs"):
                parsed = json.loads(participants) if participants else None
                names = _words(speaker, parsed)
                found |= names
                rows.extend((w, int(rowid)) for w in names | _words(entity, None))
            conn.execute("BEGIN IMMEDIATE")
            for statement in (_SCHEMA, *_RECORDS):
                conn.execute(statement)
            conn.executemany("INSERT OR IGNORE INTO person_records(name, rowid) VALUES (?, ?)",
                             rows)
            conn.executemany("INSERT OR IGNORE INTO people(name) VALUES (?)",
                             [(w,) for w in sorted(found)])
            conn.execute("COMMIT")
        self._load(conn)

    def _load(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute("SELECT name FROM people").fetchall()
        owned: dict[str, list[int]] = {}
        for name, rowid in conn.execute("SELECT name, rowid FROM person_records"):
            owned.setdefault(str(name), []).append(int(rowid))
        with self._mu:
            self._known = {str(r[0]) for r in rows}
            self._new = set()
            self.names = frozenset(self._known)
            self._records = {n: _Rowids(np.array(r, dtype=np.int64)) for n, r in owned.items()}
            self._appended = []
            self._reloaded = {}

    def records_of(self, names: Iterable[str]) -> Rowids:
        """Rowids of the records of every one of ``names`` (spoken in or about them)."""
        with self._mu:
            found = [self._records.get(n) for n in names]
        arrays = [f.rowids() for f in found if f is not None]
        if not arrays or len(arrays) < len(found):
            return np.zeros(0, dtype=np.int64)
        out = arrays[0]
        for other in arrays[1:]:
            out = np.intersect1d(out, other)
        return out

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        found: set[str] = set()
        dirty: set[str] = set()
        changes = [*((int(r), None) for r in deletes), *upserts]
        olds: dict[int, set[str]] = {}
        for chunk in chunked([r for r, _ in changes], 500):
            for name, rowid in conn.execute(
                    f"SELECT name, rowid FROM person_records WHERE rowid IN ({sql_marks(chunk)})",  # noqa: S608
                    chunk):
                olds.setdefault(int(rowid), set()).add(str(name))
        for rowid, rec in changes:
            new = owner_words(rec) if rec is not None else set()
            found |= name_words(rec) if rec is not None else set()
            old = olds.get(rowid, set())
            if old == new:
                continue
            conn.execute("DELETE FROM person_records WHERE rowid = ?", (rowid,))
            conn.executemany("INSERT INTO person_records(name, rowid) VALUES (?, ?)",
                             [(w, rowid) for w in sorted(new)])
            if old:  # a record that changed whose it is: reread those names below
                dirty |= old | new
            else:
                with self._mu:
                    self._appended.append((rowid, new))
        reloaded = {n: np.array([r[0] for r in conn.execute(
                        "SELECT rowid FROM person_records WHERE name = ? ORDER BY rowid", (n,))],
                        dtype=np.int64) for n in dirty}
        with self._mu:
            self._reloaded.update(reloaded)
            fresh = found - self._known - self._new
            self._new |= fresh
        if fresh:
            conn.executemany("INSERT OR IGNORE INTO people(name) VALUES (?)",
                             [(w,) for w in sorted(fresh)])

    def committed(self) -> None:
        with self._mu:
            for rowid, names in self._appended:
                for n in names - self._reloaded.keys():
                    self._records[n] = self._records.get(n, _Rowids(
                        np.zeros(0, dtype=np.int64))).append(rowid)
            for n, rowids in self._reloaded.items():
                self._records[n] = _Rowids(rowids)
            self._appended = []
            self._reloaded = {}
            if self._new:
                self._known |= self._new
                self._new = set()
                self.names = frozenset(self._known)

    def rolled_back(self, conn: sqlite3.Connection) -> None:
        self._load(conn)

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
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence

from memory_store.catalog import Progress
from memory_store.protocol import MemoryRecord
from memory_store.stopwords import STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)
_SCHEMA = "CREATE TABLE IF NOT EXISTS people(name TEXT PRIMARY KEY)"


def name_words(record: MemoryRecord) -> set[str]:
    """Lowercased words of the people a record names as its speaker or participants
    (one-letter words and stopwords left out: "Will" is too common a word)."""
    return _words(record.metadata.get("speaker"), record.metadata.get("participants"))


def _words(speaker: object, participants: object) -> set[str]:
    names: list[str] = []
    if isinstance(speaker, str):
        names.append(speaker)
    if isinstance(participants, list):
        names.extend(str(p).split(" (", 1)[0] for p in participants)
    return {w for n in names for w in _WORD.findall(n.lower())
            if len(w) > 1 and w not in STOPWORDS and not w.isdigit()}


def without_names(query: str, names: Iterable[str] | frozenset[str]) -> str:
    """``query`` without the whitespace-separated tokens that are a known name once
    punctuation is dropped ("Ann", "Ann?"; a possessive "Ann's" stays: it says whose),
    or ``query`` itself when nothing else would be left."""
    known = names if isinstance(names, frozenset) else frozenset(names)
    if not known:
        return query
    kept = [t for t in query.split() if "".join(_WORD.findall(t)).lower() not in known]
    return " ".join(kept) if kept else query


class PeopleIndex:
    """Known name words of one group (see the module docstring); ``names`` is safe to
    read from any thread."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._known: set[str] = set()
        self._new: set[str] = set()
        self.names: frozenset[str] = frozenset()

    def attach(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='people'"
                        ).fetchone() is None:
            # An index from before this table: learn the names of what it holds, once.
            found: set[str] = set()
            for speaker, participants in conn.execute(
                    "SELECT json_extract(record, '$.metadata.speaker'),"
                    " json_extract(record, '$.metadata.participants') FROM docs"):
                parsed = json.loads(participants) if participants else None
                found |= _words(speaker, parsed)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_SCHEMA)
            conn.executemany("INSERT OR IGNORE INTO people(name) VALUES (?)",
                             [(w,) for w in sorted(found)])
            conn.execute("COMMIT")
        self._load(conn)

    def _load(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute("SELECT name FROM people").fetchall()
        with self._mu:
            self._known = {str(r[0]) for r in rows}
            self._new = set()
            self.names = frozenset(self._known)

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        found: set[str] = set()
        for _, rec in upserts:
            found |= name_words(rec)
        with self._mu:
            fresh = found - self._known - self._new
            self._new |= fresh
        if fresh:
            conn.executemany("INSERT OR IGNORE INTO people(name) VALUES (?)",
                             [(w,) for w in sorted(fresh)])

    def committed(self) -> None:
        with self._mu:
            if self._new:
                self._known |= self._new
                self._new = set()
                self.names = frozenset(self._known)

    def rolled_back(self, conn: sqlite3.Connection) -> None:
        self._load(conn)

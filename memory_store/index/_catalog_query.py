"""Read side of the catalog: lookups, BM25 search and the rows ranking needs.

:class:`CatalogQueries` is mixed into :class:`memory_store.index._catalog.Catalog`, which owns
the connection and keeps it in step with the files; everything here only reads.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from memory_store._protocol import MemoryRecord
from memory_store.index._indexdoc import fts_query, fts_terms, record_from_json
from memory_store.ranking._filters import SearchFilters
from memory_store.ranking._lexplan import LexicalPlanner


class CatalogQueries:
    """Queries over ``docs`` and ``fts``; the subclass provides ``conn`` and ``_mu``."""

    _mu: threading.RLock
    planner: LexicalPlanner

    @property
    def conn(self) -> sqlite3.Connection:
        raise NotImplementedError

    def locate(self, memory_id: str) -> tuple[str, MemoryRecord] | None:
        """(relative path, record) of ``memory_id`` as last indexed, or None."""
        with self._mu:
            r = self.conn.execute("SELECT path, record FROM docs WHERE id=?",
                                  (memory_id,)).fetchone()
        return None if r is None else (r[0], record_from_json(r[1]))

    def lexical(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        """Top ``k`` (rowid, bm25 score; higher is better) matching ``query`` and filters
        (common terms pruned at scale: :mod:`memory_store.ranking._lexplan`)."""
        terms = fts_terms(query)
        if not terms or k <= 0:
            return []
        if filters.only_superseded_check:
            return self._lexical_unfiltered(terms, k, filters)
        where, params = filters.sql("d")
        sql = ("SELECT fts.rowid, bm25(fts) AS s FROM fts JOIN docs d ON d.rowid = fts.rowid"  # noqa: S608
               f" WHERE fts MATCH ? AND {where} ORDER BY s LIMIT ?")

        def run(match: str, limit: int) -> list[tuple[int, float]]:
            rows = self.conn.execute(sql, [match, *params, limit]).fetchall()
            return [(int(r[0]), -float(r[1])) for r in rows]

        with self._mu:
            return self.planner.top(self.conn, terms, k, run)

    def lexical_among(self, query: str, rowids: Sequence[int], k: int,
                      filters: SearchFilters) -> list[tuple[int, float]]:
        """:meth:`lexical` restricted to ``rowids`` (records not embedded yet)."""
        match = fts_query(query)
        if match is None or k <= 0 or not rowids:
            return []
        where, params = filters.sql("d")
        out: list[tuple[int, float]] = []
        with self._mu:
            for chunk in chunked(list(rowids), 500):
                sql = ("SELECT fts.rowid, bm25(fts) FROM fts JOIN docs d ON d.rowid = fts.rowid"  # noqa: S608
                       f" WHERE fts MATCH ? AND fts.rowid IN ({sql_marks(chunk)}) AND {where}")
                out.extend((int(r[0]), -float(r[1]))
                           for r in self.conn.execute(sql, [match, *chunk, *params]))
        out.sort(key=lambda t: -t[1])
        return out[:k]

    def _lexical_unfiltered(self, terms: list[str], k: int,
                            filters: SearchFilters) -> list[tuple[int, float]]:
        """The common case (no filter but "not superseded"): rank in FTS alone, without
        the join to ``docs`` for every match, and drop the few superseded rows after."""

        def run(match: str, limit: int) -> list[tuple[int, float]]:
            rows = self.conn.execute(
                "SELECT rowid, bm25(fts) AS s FROM fts WHERE fts MATCH ? ORDER BY s LIMIT ?",
                (match, limit + len(gone))).fetchall()
            return [(int(r[0]), -float(r[1])) for r in rows if int(r[0]) not in gone][:limit]

        with self._mu:
            gone: set[int] = set()
            if not filters.include_superseded:
                now = (filters.now.timestamp() if filters.now else 0.0)
                gone = {int(r[0]) for r in self.conn.execute(
                    "SELECT rowid FROM docs WHERE valid_to IS NOT NULL AND valid_to <= ?",
                    (now,))}
            return self.planner.top(self.conn, terms, k, run)

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

    def docs_rows(self, columns: str, rowids: list[int]) -> list[tuple[Any, ...]]:
        """``(rowid, *columns)`` of the ``docs`` rows of ``rowids`` (500 ids a query)."""
        with self._mu:
            return [r for chunk in chunked(rowids, 500) for r in self.conn.execute(
                f"SELECT rowid, {columns} FROM docs WHERE rowid IN ({sql_marks(chunk)})",  # noqa: S608
                chunk)]

    def signals(self, rowids: list[int]) -> dict[int, tuple[float, float]]:
        """rowid -> (created epoch seconds, trust) for ranking."""
        return {int(r[0]): (float(r[1]), float(r[2]))
                for r in self.docs_rows("created, trust", rowids)}

    def records(self, rowids: list[int]) -> dict[int, MemoryRecord]:
        return {int(r[0]): record_from_json(r[1]) for r in self.docs_rows("record", rowids)}

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


def sql_marks(items: list[int]) -> str:
    return ",".join("?" * len(items))


def chunked(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]

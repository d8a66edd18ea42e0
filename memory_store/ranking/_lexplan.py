"""BM25 top-k without scoring every row a common word matches (issue 12).

FTS5 computes ``bm25()`` for every row matching any word of an OR-query before
``ORDER BY ... LIMIT``; at a million records a question's common words ("said", a
name, a month: every record's date is indexed) match tens of thousands of rows. The
query's terms are split by document frequency (the index's own ``fts5vocab``, after
stemming the words with the index's tokenizer in a temporary FTS5 table): from the
rarest up, terms are *rare* while their document frequencies sum to at most ``budget``
(the rarest always, and more until they reach ``k``), the rest are *common*. Two
queries then cover every row matching a rare term, each scored with every query term:

- ``(rare) AND (common)``: rows with a rare and a common term;
- ``(rare) NOT (common)``: rows with rare terms only (their common terms score 0).

``bm25()`` takes each phrase's IDF from its whole doclist, whatever the expression, so
the two sets are disjoint and their scores are exactly the full OR-query's; their merged
top ``k`` is the full query's top ``k`` among rows that match a rare term. Rows matching
only common terms are not scored: they can only outrank those when the rare terms are
scarce, so when the two queries return fewer than ``k`` rows the full query runs. Groups
whose highest rowid is at most ``budget`` run the full query unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

#: Rows the rare terms may match in all; groups of at most this many records are never
#: pruned.
BUDGET = 20_000
_TOKENIZER = "porter unicode61 remove_diacritics 2"  # the catalog's fts table's
_MAX_CACHED = 50_000

#: ``run(match, limit)``: (rowid, bm25 score, higher better) of the top ``limit`` rows.
Runner = Callable[[str, int], list[tuple[int, float]]]


class LexicalPlanner:
    """Plans the pruned query for one catalog connection (call under its lock)."""

    def __init__(self, budget: int = BUDGET) -> None:
        self.budget = budget
        self._stems: dict[str, str | None] = {}  # phrase -> its single token, if one
        self._conn: sqlite3.Connection | None = None

    def top(self, conn: sqlite3.Connection, terms: Sequence[str], k: int,
            run: Runner) -> list[tuple[int, float]]:
        """The top ``k`` of the OR-query of ``terms`` (quoted phrases) via ``run``."""
        full = " OR ".join(terms)
        split = self.split(conn, terms, k) if len(terms) > 1 and _rows(conn) > self.budget else None
        if split is None:
            return run(full, k)
        rare, common = (" OR ".join(t) for t in split)
        rows = run(f"({rare}) AND ({common})", k) + run(f"({rare}) NOT ({common})", k)
        if len(rows) < k:
            return run(full, k)
        rows.sort(key=lambda r: -r[1])
        return rows[:k]

    def split(self, conn: sqlite3.Connection, terms: Sequence[str],
              k: int) -> tuple[list[str], list[str]] | None:
        """(rare, common) terms, or None when the full query is cheap enough."""
        try:
            dfs = self.doc_freqs(conn, terms)
        except sqlite3.Error:
            return None
        order = sorted(range(len(terms)), key=lambda i: dfs[i])
        rare: list[str] = []
        common: list[str] = []
        total = 0
        for i in order:
            if not rare or total < k or total + dfs[i] <= self.budget:
                rare.append(terms[i])
                total += dfs[i]
            else:
                common.append(terms[i])
        return (rare, common) if common else None

    def doc_freqs(self, conn: sqlite3.Connection, terms: Sequence[str]) -> list[int]:
        """Rows containing each term (0 for a phrase of several tokens: kept rare)."""
        self._attach(conn)
        unknown = [t for t in terms if t not in self._stems]
        if unknown:
            if len(self._stems) > _MAX_CACHED:
                self._stems.clear()
            conn.execute("DELETE FROM temp.lexplan_q")
            conn.executemany("INSERT INTO temp.lexplan_q(rowid, w) VALUES(?, ?)",
                             [(i, t[1:-1].replace('""', '"')) for i, t in enumerate(unknown)])
            tokens: dict[int, list[str]] = {}
            for doc, term in conn.execute("SELECT doc, term FROM temp.lexplan_qi"):
                tokens.setdefault(int(doc), []).append(str(term))
            for i, t in enumerate(unknown):
                got = tokens.get(i, [])
                self._stems[t] = got[0] if len(got) == 1 else None
        out = []
        for t in terms:
            stem = self._stems[t]
            row = None if stem is None else conn.execute(
                "SELECT doc FROM temp.lexplan_vocab WHERE term = ?", (stem,)).fetchone()
            out.append(0 if row is None else int(row[0]))
        return out

    def _attach(self, conn: sqlite3.Connection) -> None:
        if conn is self._conn:
            return
        # One statement at a time: executescript would commit an open transaction.
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.lexplan_vocab"
                     " USING fts5vocab(main, fts, row)")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.lexplan_q"
                     f" USING fts5(w, tokenize='{_TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.lexplan_qi"
                     " USING fts5vocab(temp, lexplan_q, instance)")
        self._conn = conn


def _rows(conn: sqlite3.Connection) -> int:
    """An upper bound on the catalog's records (its highest rowid), at index cost."""
    row = conn.execute("SELECT max(rowid) FROM docs").fetchone()
    return int(row[0] or 0)

"""How much of a record ends by asking, so its score can pass to the record that answers.

In a chat, a question is answered by the next turn: "What's your best camping memory?"
shares every word with a question about camping, while the answer ("the Perseids,
lying there watching the sky") shares few. Ranked alone, the question turn takes the
slot its answer should have. The hybrid backend moves part of a record's score to the
next record of its session, the part being :func:`ask_weight` of its text: the square
of the share of questions among the sentences of its last line (the last speaker's
words; a workers' episode ends with the bot's reply, which is what the next turn
answers). Squared, because a turn that tells something and then asks back ("we went
camping two weeks ago. What have you been up to?") holds its own answer. Measured on
LoCoMo's tuning conversation: ``bench/README.md``.

:class:`AskIndex` is an index hook keeping the non-zero weights in an ``asks`` table of
the catalog (most records ask nothing) and in RAM by rowid.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memory_store._protocol import MemoryRecord
from memory_store.index._catalog import Progress
from memory_store.index._dense import grown

_SCHEMA = "CREATE TABLE IF NOT EXISTS asks(rowid INTEGER PRIMARY KEY, weight REAL NOT NULL)"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_BRACKETED = re.compile(r"\[[^\]]*\]")  # an attachment's description, not a sentence
Weights = npt.NDArray[np.float32]


def ask_weight(text: str) -> float:
    """Square of the share of questions among the sentences of ``text``'s last line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return 0.0
    last = _BRACKETED.sub("", lines[-1]).strip()
    sentences = [s for s in _SENTENCE_END.split(last) if s]
    if not sentences:
        return 0.0
    share = sum(1 for s in sentences if s.endswith("?")) / len(sentences)
    return share * share


class AskIndex:
    """Ask weights by rowid (see the module docstring); :meth:`of` is safe to call from
    any thread."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._weights: Weights = np.zeros(0, dtype=np.float32)
        self._pending: dict[int, float] = {}

    def attach(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='asks'"
                        ).fetchone() is None:
            # An index from before this table: weigh what it holds, once.
            rows = [(int(r), w) for r, text in conn.execute(
                        "SELECT rowid, json_extract(record, '$.content') FROM docs")
                    if (w := ask_weight(str(text or "")))]
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_SCHEMA)
            conn.executemany("INSERT INTO asks(rowid, weight) VALUES (?, ?)", rows)
            conn.execute("COMMIT")
        self._load(conn)

    def _load(self, conn: sqlite3.Connection) -> None:
        rows = np.array(conn.execute("SELECT rowid, weight FROM asks").fetchall(),
                        dtype=np.float64).reshape(-1, 2)
        rowids = rows[:, 0].astype(np.int64)
        weights = np.zeros(int(rowids.max()) + 1 if len(rowids) else 0, dtype=np.float32)
        weights[rowids] = rows[:, 1]
        with self._mu:
            self._weights = weights
            self._pending = {}

    def apply(self, conn: sqlite3.Connection, upserts: Sequence[tuple[int, MemoryRecord]],
              deletes: Sequence[int], progress: Progress | None) -> None:
        changed = {int(rowid): 0.0 for rowid in deletes}
        changed.update((rowid, ask_weight(rec.content)) for rowid, rec in upserts)
        conn.executemany("DELETE FROM asks WHERE rowid = ?",
                         [(r,) for r, w in changed.items() if not w])
        conn.executemany("INSERT OR REPLACE INTO asks(rowid, weight) VALUES (?, ?)",
                         [(r, w) for r, w in changed.items() if w])
        with self._mu:
            self._pending.update(changed)

    def committed(self) -> None:
        with self._mu:
            if not self._pending:
                return
            weights = grown(self._weights, max(self._pending) + 1, 0.0)
            for rowid, weight in self._pending.items():
                weights[rowid] = weight
            self._weights = weights
            self._pending = {}

    def rolled_back(self, conn: sqlite3.Connection) -> None:
        self._load(conn)

    def of(self, rowids: npt.NDArray[np.int64]) -> Weights:
        """The weights of ``rowids`` (0 for any rowid it holds nothing for)."""
        with self._mu:
            weights = self._weights
        out = np.zeros(len(rowids), dtype=np.float32)
        known = (rowids >= 0) & (rowids < len(weights))
        out[known] = weights[rowids[known]]
        return out

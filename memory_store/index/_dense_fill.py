"""Embedding off the reply path: a background thread that fills in pending vectors.

A write makes its record durable and searchable by text at once (the file, the catalog
row and FTS5 commit together); :meth:`DenseIndex.apply` only marks it pending. This
filler then embeds pending records in batches (the ONNX model costs much less per text
in a batch than one at a time), and re-checks the window of every episode whose
neighbourhood changed, re-embedding it only when its text actually differs.

Each batch reads what to embed under the catalog's lock, embeds with no lock held (so
searches and writes go on), then writes the vectors in one transaction that first
checks the record did not change meanwhile. Nothing here is needed for correctness:
a crash leaves records pending, and the next open finds them again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from memory_store.index._catalog import Catalog
from memory_store.index._dense import DenseIndex, f16, from_f16, next_dense_slots
from memory_store.index._dense_text import digest, record_texts, window_text
from memory_store.index._embed import Vectors
from memory_store.index._indexdoc import record_from_json

log = logging.getLogger(__name__)

#: Records per batch: big enough for the model's batching (32 texts per run), small
#: enough that a search waiting for the model lock waits for one run at most.
BATCH = 64
#: After a write wakes the filler it waits this long, so the rest of the turn's writes
#: (and the reply) run first and the batch grows.
LINGER = 0.25
#: The filler's thread runs at this nice value (Linux nice is per thread): on a small
#: machine the reply path wins the CPU and the embedding takes the idle time.
NICE = 10


class DenseFiller:
    """Embeds what :class:`DenseIndex` marks pending; ``background`` runs it in a thread,
    otherwise only :meth:`flush` does."""

    def __init__(self, dense: DenseIndex, catalog: Catalog, *, batch: int = BATCH,
                 background: bool = True) -> None:
        self.dense = dense
        self.catalog = catalog
        self.batch = batch
        self._fill = threading.Lock()
        self._stop = False
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"memory-fill-{catalog.group.group}")
            self._thread.start()

    @property
    def idle(self) -> bool:
        return not (self.dense.pending or self.dense.wpending)

    def _loop(self) -> None:
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        while not self._stop:
            if self.dense.wake.wait(timeout=5.0):
                time.sleep(LINGER)
            self.dense.wake.clear()
            while not self._stop and not self.idle:
                try:
                    if not self.run_once():
                        break
                except Exception:
                    if self._stop:
                        return
                    log.exception("embedding pending memories of %s failed; will retry",
                                  self.catalog.group.group)
                    time.sleep(1.0)

    def flush(self, timeout: float | None = None) -> None:
        """Embed everything pending now, in this thread (returns when none is left, or
        raises TimeoutError after ``timeout`` seconds). A batch the background thread
        has in flight holds the fill lock, so this also waits for it to land."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._fill:
                if self.idle:
                    return
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError("pending memories were not embedded in time")
                self._records()
                self._windows()

    def close(self) -> None:
        """Stop the thread after its current batch; what is pending stays pending."""
        self._stop = True
        self.dense.wake.set()
        with self._fill:
            pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self.catalog.lock, self.dense.lock:
            yield

    @contextmanager
    def _written(self, undo: Callable[[], object]) -> Iterator[sqlite3.Connection]:
        """One write transaction of the catalog (call under ``_locked``); when it fails,
        the hooks (the dense state) are reloaded and ``undo`` puts its work back in the
        queue."""
        try:
            with self.catalog.write_txn() as conn:
                yield conn
        except BaseException:
            undo()
            raise

    def run_once(self) -> int:
        """One batch of records, then one of windows; returns how many were handled."""
        with self._fill:
            if self._stop:
                return 0
            return self._records() + self._windows()

    def _records(self) -> int:
        dense, batch = self.dense, self.batch
        with self._locked():
            todo = dense.take_pending(batch)
            if not todo:
                return 0
            rows = self.catalog.docs_rows("hash, record", todo)
        items = [(int(r), str(h), record_from_json(j)) for r, h, j in rows]
        texts = [record_texts(rec) for _, _, rec in items]
        vecs = self.dense.embedder.embed([t for ts in texts for t in ts])
        with self._locked():
            assert dense.mat is not None and dense.cmat is not None
            placed = []
            finished = [r for r in todo if r not in {i[0] for i in items}]
            with self._written(lambda: dense.requeue(todo)) as conn:
                slot, cslot = next_dense_slots(conn)
                at = 0
                for (rowid, h, rec), ts in zip(items, texts, strict=True):
                    # Rounded to the stored float16 first, so vectors come out the same
                    # whichever path (this one, a window update, a rebuild) writes them.
                    block = from_f16(f16(vecs[at : at + len(ts)]), dense.embedder.dim)
                    at += len(ts)
                    cur = conn.execute("SELECT hash FROM docs WHERE rowid=?",
                                       (rowid,)).fetchone()
                    done = conn.execute("SELECT 1 FROM vecs WHERE rowid=?",
                                        (rowid,)).fetchone()
                    if cur is None or done is not None:
                        finished.append(rowid)  # gone, or another process embedded it
                        continue
                    if cur[0] != h:
                        continue  # changed meanwhile: apply() queued it again
                    w = conn.execute("SELECT vec FROM wvecs WHERE rowid=?",
                                     (rowid,)).fetchone()
                    window = from_f16(w[0], dense.embedder.dim)[0] if w and w[0] else None
                    dense.mat.put(slot, dense.combine(block[0], window, len(ts) > 1)[None, :])
                    dense.cmat.put(cslot, block[1:])
                    conn.execute("INSERT INTO vecs(rowid, slot, cstart, ccount, vec, h)"
                                 " VALUES(?,?,?,?,?,?)",
                                 (rowid, slot, cslot, len(ts) - 1, f16(block), digest(ts)))
                    placed.append((rowid, rec, slot, cslot, len(ts) - 1, window is not None))
                    slot, cslot = slot + 1, cslot + len(ts) - 1
            dense.embedded(finished + [p[0] for p in placed])
            for rowid, rec, s, c, cc, win in placed:
                dense._place(rowid, s, c, cc, rec.created.timestamp(), rec.trust,
                             rec.valid_to.timestamp() if rec.valid_to else np.inf,
                             rec.kind == "episode", win)
        return len(todo)

    def _windows(self) -> int:
        dense, batch = self.dense, self.batch
        with self._locked():
            conn = self.catalog.conn
            todo = dense.take_windows(batch)
            if not todo:
                return 0
            changed: list[tuple[int, str | None, str]] = []
            for rowid in todo:
                text = window_text(conn, rowid, dense.session_gap)
                h = "" if text is None else digest([text])
                old = conn.execute("SELECT h FROM wvecs WHERE rowid=?", (rowid,)).fetchone()
                if old is not None and old[0] == h:
                    conn.execute("UPDATE wvecs SET dirty=0 WHERE rowid=?", (rowid,))
                elif conn.execute("SELECT 1 FROM docs WHERE rowid=?", (rowid,)).fetchone():
                    changed.append((rowid, text, h))
        texts = [t for _, t, _ in changed if t is not None]
        vecs = iter(self.dense.embedder.embed(texts)) if texts else iter(())
        with self._locked():
            assert dense.mat is not None
            with self._written(lambda: dense.mark_window(*(r for r, _, _ in changed))) as conn:
                for rowid, text, h in changed:
                    vec = next(vecs) if text is not None else None
                    now = window_text(conn, rowid, dense.session_gap)
                    if ("" if now is None else digest([now])) != h:
                        dense.mark_window(rowid)  # its neighbourhood moved again
                        continue
                    conn.execute("INSERT OR REPLACE INTO wvecs(rowid, vec, h, dirty)"
                                 " VALUES(?,?,?,0)", (rowid, b"" if vec is None else f16(vec), h))
                    self._recombine(rowid, vec)
        return len(todo)

    def _recombine(self, rowid: int, window: Vectors | None) -> None:
        """Rewrite the combined vector of an embedded record after its window changed."""
        dense = self.dense
        slot = dense.slot(rowid)
        row = self.catalog.conn.execute("SELECT vec, ccount FROM vecs WHERE rowid=?",
                                        (rowid,)).fetchone()
        if slot < 0 or row is None:
            return  # not embedded yet: its window is read when it is
        assert dense.mat is not None
        whole = from_f16(row[0], dense.embedder.dim)[0]
        dense.mat.put(slot, dense.combine(whole, window, row[1] > 0)[None, :])
        dense.set_best_weight(slot, row[1] > 0, window is not None)

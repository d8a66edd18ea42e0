"""A search scores sentence vectors only for the best candidates of the combined vector."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from memory_store import open_memory
from memory_store.backends.vector import VectorMemory
from memory_store.index import default_embedder

GROUP = "test:rerank"
TOPICS = ["tea", "bicycles", "the harbour", "chess", "violins", "snow", "bread", "trains",
          "tomatoes", "lanterns", "owls", "marathons"]


def _group(tmp_path: Path) -> VectorMemory:
    mem = open_memory(tmp_path, GROUP, "vector", embedder=default_embedder(),
                      background=False)
    assert isinstance(mem, VectorMemory)
    for i, topic in enumerate(TOPICS):
        mem.write_sync(f"Note {i} is about {topic}. Someone mentioned {topic} at lunch."
                       f" It rained on day {i}.", kind="fact", metadata={"id": f"n{i}"})
    mem.flush()
    return mem


def test_only_candidates_sentences_are_scored(tmp_path: Path) -> None:
    mem = _group(tmp_path)
    try:
        cmat = mem.dense.cmat
        assert cmat is not None
        calls: list[Any] = []
        full, runs = cmat.dot, cmat.dot_runs
        cmat.dot = lambda q, n: calls.append(("all", n)) or full(q, n)  # type: ignore[method-assign]
        cmat.dot_runs = lambda q, s, c: calls.append(  # type: ignore[method-assign]
            ("rows", np.repeat(s, c) + np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c))
        ) or runs(q, s, c)
        q = "who talked about owls at lunch"
        mem.dense.rerank = 0
        exact = [h.id for h in mem.search_sync(q, k=3)]
        assert [c[0] for c in calls] == ["all"]
        calls.clear()
        mem.dense.rerank = 4
        approx = [h.id for h in mem.search_sync(q, k=3)]
        assert [c[0] for c in calls] == ["rows"]
        owners = set(mem.dense._cowner[calls[0][1]].tolist())
        assert len(owners) == 4          # 4 records' sentences, not all 12
        assert approx[0] == exact[0] == "n10"
    finally:
        mem.close()


def test_candidates_get_the_exact_score(tmp_path: Path) -> None:
    mem = _group(tmp_path)
    try:
        qvec = mem.dense.embedder.embed(["a violin concert in the snow"])[0]
        with mem.dense.lock:
            mem.dense.rerank = 0
            exact = mem.dense.masked_scores(qvec, now=0.0)
            mem.dense.rerank = 3
            approx = mem.dense.masked_scores(qvec, now=0.0)
        best = np.argsort(-approx)[:3]
        np.testing.assert_allclose(approx[best], exact[best], rtol=1e-5)
        assert set(best) == set(np.argsort(-exact)[:3])
    finally:
        mem.close()

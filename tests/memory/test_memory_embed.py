"""The local MiniLM embedder and the dense index around it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memory_store import open_memory
from memory_store.backends.hybrid import HybridMemory
from memory_store.index import EMBED_DIM, default_embedder


def test_embeddings_are_normalized_and_ordered() -> None:
    emb = default_embedder()
    texts = ["A man is eating food.", "", "x" * 5000]
    vecs = emb.embed(texts)
    assert vecs.shape == (3, EMBED_DIM)
    assert vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    # Batching and sorting by length must not change a text's vector.
    alone = emb.embed(["A man is eating food."])[0]
    assert float(alone @ vecs[0]) > 0.9999
    assert emb.embed([]).shape == (0, EMBED_DIM)


def test_similar_sentences_score_higher_than_unrelated() -> None:
    emb = default_embedder()
    a, b, c, d = emb.embed([
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A monkey is playing drums.",
        "The stock market fell sharply today.",
    ])
    assert float(a @ b) > 0.6
    assert float(a @ b) > float(a @ c) + 0.3
    assert float(a @ b) > float(a @ d) + 0.3


def test_paraphrase_is_found_without_shared_words(tmp_path: Path) -> None:
    mem = open_memory(tmp_path, "t:1", "vector", embedder=default_embedder())
    try:
        mem.write_sync("My dog loves playing fetch in the park.", kind="fact")
        mem.write_sync("Quarterly taxes are due next week.", kind="fact")
        mem.flush()  # vectors are computed in the background; this asks for them now
        hits = mem.search_sync("puppy enjoys chasing a ball", k=1)
        assert hits[0].content.startswith("My dog")
    finally:
        mem.close()


def test_vectors_are_added_when_a_file_index_is_reopened_as_hybrid(tmp_path: Path) -> None:
    f = open_memory(tmp_path, "t:1", "file")
    f.write_sync("Sam's birthday is in June.", kind="fact", metadata={"id": "bday"})
    f.write_sync("The server runs Debian.", kind="fact", metadata={"id": "os"})
    f.close()
    h = open_memory(tmp_path, "t:1", "hybrid", embedder=default_embedder())
    try:
        assert isinstance(h, HybridMemory)
        h.flush()  # the vectors are computed in the background
        assert len(h.dense) == 2
        assert h.search_sync("when is Sam born", k=1)[0].id == "bday"
    finally:
        h.close()


def _search_in_child(data: str) -> None:
    import os

    child = open_memory(Path(data), "t:fork", "hybrid", embedder=default_embedder())
    hits = child.search_sync("green tea", k=1)
    os._exit(0 if hits and hits[0].id == "tea" else 3)


def test_hybrid_search_works_in_a_forked_child(tmp_path: Path) -> None:
    """RQ's forking worker runs jobs in a fork of a process that may have searched."""
    import multiprocessing

    mem = open_memory(tmp_path, "t:fork", "hybrid", embedder=default_embedder())
    mem.write_sync("Ann likes green tea.", kind="fact", metadata={"id": "tea"})
    assert mem.search_sync("green tea", k=1)[0].id == "tea"  # parent's executor is live
    proc = multiprocessing.get_context("fork").Process(target=_search_in_child,
                                                       args=(str(tmp_path),))
    proc.start()
    proc.join(timeout=120)
    if proc.exitcode is None:
        proc.kill()
    mem.close()
    assert proc.exitcode == 0

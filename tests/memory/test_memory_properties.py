"""Property tests: file format round trip, id -> file name safety, and the incremental
indexes always agree with a rebuild from the files."""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_store import InvalidMemoryId, MemoryRecord, open_memory
from memory_store.backends.hybrid import HybridMemory
from memory_store.files import (
    id_from_filename,
    memory_filename,
    memory_path,
    parse_memory_file,
    render_memory_file,
    validate_memory_id,
)
from memory_store.index import sentence_chunks


class HashEmbedder:
    """Deterministic bag-of-words hashing embedder: fast, no model."""

    model_id = "hash-test"
    dim = 32

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
                out[i, h % self.dim] += 1.0 if (h >> 8) & 1 else -1.0
            norm = np.linalg.norm(out[i])
            out[i] = out[i] / norm if norm else out[i]
            if not norm:
                out[i, 0] = 1.0
        return out


_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\x00"), max_size=200)
_meta_value = st.one_of(st.integers(-10**6, 10**6), st.text(max_size=20), st.booleans(),
                        st.lists(st.integers(0, 100), max_size=4))


@given(content=_text, trust=st.floats(0, 1), tags=st.lists(st.text(min_size=1, max_size=10),
                                                             max_size=3),
       meta=st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True), _meta_value,
                            max_size=4))
def test_render_parse_round_trip(content: str, trust: float, tags: list[str],
                                 meta: dict[str, object]) -> None:
    meta = {k: v for k, v in meta.items() if k not in (
        "id", "kind", "source", "created", "updated", "trust", "valid_from", "valid_to", "tags")}
    when = datetime(2024, 2, 29, 12, 30, tzinfo=UTC)
    rec = MemoryRecord(id="x-1", kind="fact", content=content.rstrip("\n"), source="s",
                       created=when, updated=when, trust=round(trust, 4), tags=tuple(tags),
                       metadata=meta)
    back = parse_memory_file(render_memory_file(rec), fallback_id="other", fallback_kind="note",
                             mtime=when)
    assert back == rec


@given(st.text(min_size=1, max_size=200))
def test_any_accepted_id_maps_to_one_safe_file_inside_the_group(memory_id: str) -> None:
    try:
        validate_memory_id(memory_id)
    except InvalidMemoryId:
        return
    name = memory_filename(memory_id)
    assert re.fullmatch(r"[A-Za-z0-9._~-]+\.md", name)
    assert not name.startswith(".")
    assert len(name.encode()) <= 255
    root = Path("/srv/data/groups/t/1")
    assert memory_path(root, "fact", memory_id).parent == root / "entities"
    if len(name) < 150:
        assert id_from_filename(name) == memory_id


@given(st.lists(st.text(min_size=1, max_size=8), min_size=2, max_size=2, unique=True))
def test_distinct_ids_get_distinct_files(ids: list[str]) -> None:
    try:
        names = [memory_filename(i) for i in ids]
    except InvalidMemoryId:
        return
    assert names[0] != names[1]


def test_sentence_chunks_keep_the_speaker_label() -> None:
    assert sentence_chunks("Ann: Hi there! We went to Oslo. It rained.") == [
        "Ann: Hi there!", "Ann: We went to Oslo.", "Ann: It rained."]
    assert sentence_chunks("Only one sentence here.") == []


_WORDS = ["apple", "river", "guitar", "oslo", "cat", "tax", "garden", "piano", "rain", "bike"]
_op: st.SearchStrategy[tuple[str, int, list[str]]] = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 9),
              st.lists(st.sampled_from(_WORDS), min_size=1, max_size=12)),
    st.tuples(st.just("update"), st.integers(0, 9),
              st.lists(st.sampled_from(_WORDS), min_size=1, max_size=12)),
    st.tuples(st.just("delete"), st.integers(0, 9), st.just([])),
)


def _sentences(words: list[str]) -> str:
    return " ".join(w + ("." if i % 3 == 2 else "") for i, w in enumerate(words))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=1, max_size=25), query=st.sampled_from(_WORDS))
def test_incremental_index_equals_rebuild_from_files(ops: list[tuple[str, int, list[str]]],
                                                     query: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        mem = open_memory(Path(tmp), "p:1", "hybrid", embedder=HashEmbedder(), durable=False,
                          watch="poll")
        live: dict[str, str] = {}
        try:
            for op, n, words in ops:
                mid = f"r{n}"
                kind = "episode" if n % 2 else "fact"
                if op == "write":
                    mem.write_sync(_sentences(words), kind=kind, metadata={"id": mid})
                    live.setdefault(mid, _sentences(words))
                elif op == "update" and mid in live:
                    mem.update_sync(mid, _sentences(words))
                    live[mid] = _sentences(words)
                elif op == "delete" and mid in live:
                    mem.delete_sync(mid)
                    del live[mid]
            mem.flush()  # vectors are computed in the background
            got = [(h.id, round(h.score, 5)) for h in mem.search_sync(query, k=20)]
            assert {h.id: h.content for h in mem.records()} == live
        finally:
            mem.close()
        fresh = open_memory(Path(tmp), "p:1", "hybrid", embedder=HashEmbedder(),
                            durable=False, watch="poll")
        try:
            fresh.reindex()
            fresh.flush()
            again = [(h.id, round(h.score, 5)) for h in fresh.search_sync(query, k=20)]
        finally:
            fresh.close()
        assert sorted(got) == sorted(again)
        assert isinstance(mem, HybridMemory)
        assert len(mem.dense) == len(live)


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().embed(texts)


def test_front_matter_only_changes_do_not_re_embed(tmp_path: Path) -> None:
    emb = CountingEmbedder()
    # background=False: nothing is embedded until flush(), so the counts are exact.
    mem = open_memory(tmp_path, "p:2", "vector", embedder=emb, durable=False,
                      background=False)
    try:
        mem.write_sync("Ann likes tea. Bob likes coffee.", kind="fact", metadata={"id": "a"})
        mem.flush()
        after_write = emb.texts
        assert after_write == 3  # whole text + two sentences
        mem.update_sync("a", "Ann likes tea. Bob likes coffee.", changes={"trust": 0.9})
        mem.flush()
        assert emb.texts == after_write
        mem.update_sync("a", "Ann likes tea. Bob likes coffee.",
                        changes={"valid_to": "2000-01-01T00:00:00Z"})
        mem.flush()
        assert emb.texts == after_write
        assert mem.search_sync("tea", k=5) == []  # superseded is applied without re-embed
        before = emb.texts  # the search embedded its query
        mem.update_sync("a", "Ann likes cocoa.", changes={"valid_to": None})
        mem.flush()
        assert emb.texts == before + 1
        assert mem.search_sync("cocoa", k=1)[0].content == "Ann likes cocoa."
    finally:
        mem.close()

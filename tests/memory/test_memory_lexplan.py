"""BM25 at scale: common query terms are not scored row by row (issue 12)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_store import open_memory
from memory_store.backends.file import FileMemory
from memory_store.index import fts_terms
from memory_store.ranking import LexicalPlanner, SearchFilters

GROUP = "t:lexplan"
COMMON = ["said", "weather", "friday", "music"]
RARE = ["zeppelin", "marmalade", "quokka", "tangerine", "obsidian", "harpsichord"]


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[FileMemory]:
    m = open_memory(tmp_path, GROUP, "file")
    assert isinstance(m, FileMemory)
    rng = random.Random(7)
    for i in range(120):
        words = rng.sample(COMMON, 3) + rng.sample(RARE, 1 if i % 4 == 0 else 0)
        words += ["filler"] * rng.randint(0, 6)
        rng.shuffle(words)
        m.write_sync(" ".join(words) + ".", kind="fact", metadata={"id": f"f{i}"})
    try:
        yield m
    finally:
        m.close()


def _statements(mem: FileMemory, query: str, k: int) -> tuple[list[tuple[int, float]],
                                                                list[str]]:
    seen: list[str] = []
    mem.catalog.conn.set_trace_callback(seen.append)
    try:
        rows = mem.catalog.lexical(query, k, SearchFilters.parse(None))
    finally:
        mem.catalog.conn.set_trace_callback(None)
    return rows, [s for s in seen if "bm25(fts)" in s]


def _full(mem: FileMemory, query: str, k: int) -> list[tuple[int, float]]:
    mem.catalog.planner.budget = 10**9  # every term fits: the plain OR-query
    try:
        return mem.catalog.lexical(query, k, SearchFilters.parse(None))
    finally:
        mem.catalog.planner.budget = 20


def test_doc_freqs_use_the_index_stems(mem: FileMemory) -> None:
    planner = mem.catalog.planner
    texts = [r.content for r in mem.records()]
    dfs = planner.doc_freqs(mem.catalog.conn, fts_terms("Weathers said quokkas foo_bar"))
    assert dfs[0] == sum("weather" in t for t in texts)  # "weathers" stems to "weather"
    assert dfs[1] == sum("said" in t for t in texts)
    assert dfs[2] == sum("quokka" in t for t in texts) > 0
    assert dfs[3] == 0  # two tokens: no single df, treated as rare


def test_common_terms_are_not_scored_alone_and_the_top_k_is_unchanged(
        mem: FileMemory) -> None:
    query = "what did she say about the weather and music on friday with the quokka"
    mem.catalog.planner.budget = 20
    rows, statements = _statements(mem, query, 3)
    assert len(statements) == 2
    assert all('"quokka"' in s and ('AND (' in s or 'NOT (' in s) for s in statements)
    assert not any(" OR ".join(fts_terms(query)) in s for s in statements)
    full = _full(mem, query, 3)
    assert [r for r, _ in rows] == [r for r, _ in full]
    assert [s for _, s in rows] == pytest.approx([s for _, s in full], rel=1e-12)


def test_too_few_rare_matches_run_the_full_query(mem: FileMemory) -> None:
    planner = LexicalPlanner(budget=20)
    asked: list[str] = []

    def run(match: str, limit: int) -> list[tuple[int, float]]:
        asked.append(match)  # e.g. a filter left two rows with a rare term
        return [(len(asked), 1.0)] if "(" in match else [(9, 2.0)] * limit

    rows = planner.top(mem.catalog.conn, fts_terms("weather music quokka"), 4, run)
    assert asked[-1] == '"weather" OR "music" OR "quokka"' and len(asked) == 3
    assert rows == [(9, 2.0)] * 4


def test_small_groups_run_the_plain_query(mem: FileMemory) -> None:
    rows, statements = _statements(mem, "weather music quokka", 5)
    assert len(statements) == 1  # default budget: every term fits
    assert rows == _full(mem, "weather music quokka", 5)


def test_planning_inside_a_transaction_does_not_commit_it(mem: FileMemory) -> None:
    conn = mem.catalog.conn
    planner = LexicalPlanner(budget=1)
    conn.execute("BEGIN")
    try:
        conn.execute("INSERT INTO meta VALUES('lexplan-test', 'x')")
        assert planner.split(conn, fts_terms("weather quokka"), 1) is not None
        assert conn.in_transaction
    finally:
        conn.execute("ROLLBACK")
    assert conn.execute("SELECT 1 FROM meta WHERE key='lexplan-test'").fetchone() is None

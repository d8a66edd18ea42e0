"""A record that ends by asking passes its score to the record that answers it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memory_store import open_memory
from memory_store.backends.hybrid import HybridMemory
from memory_store.index import default_embedder
from memory_store.ranking import ask_weight

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_ask_weight_is_the_squared_share_of_questions_in_the_last_line() -> None:
    assert ask_weight("Bo: What's your best camping memory?") == 1.0
    assert ask_weight("Bo: Wow! Any more paintings coming up?") == 0.25
    assert ask_weight("Ann: We went camping. It rained. Did you go?") == pytest.approx(1 / 9)
    assert ask_weight("Ann: We went camping last week.") == 0.0
    # An attachment's description is not a sentence of the turn.
    assert ask_weight("Bo: Where was this? [shares a photo: a lake. Calm.]") == 1.0
    # A workers' episode: the bot's reply is the last line; its question is what the
    # next turn answers, the member's question above it was answered in the record.
    episode = "Turn in t:g.\n\n- [2024-05-01 12:00:00] Ann (t:1): where is it?\n\nBot: Lisbon."
    assert ask_weight(episode) == 0.0
    assert ask_weight(episode.replace("Lisbon.", "Which city do you mean?")) == 1.0
    assert ask_weight("") == ask_weight("\n  \n") == 0.0


def rowid(mem: HybridMemory, memory_id: str) -> int:
    row = mem.catalog.conn.execute("SELECT rowid FROM docs WHERE id = ?", (memory_id,)).fetchone()
    assert row is not None
    return int(row[0])


def _session(mem: HybridMemory) -> None:
    turns = [("t1", "Bo", "What's your best camping memory by the lake?"),
             ("t2", "Ann", "Watching the Perseid meteor shower from our tent."),
             ("t3", "Bo", "I went to the lake for a swim yesterday.")]
    for i, (tid, who, text) in enumerate(turns):
        mem.write_sync(f"{who}: {text}", kind="episode", metadata={
            "id": tid, "speaker": who, "created": (T0 + timedelta(minutes=i)).isoformat()})
    mem.flush()


def test_the_answer_outranks_the_question_it_answers(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    mem = open_memory(tmp_path, "t:asks", "hybrid", embedder=default_embedder(),
                      background=False)
    assert isinstance(mem, HybridMemory)
    _session(mem)
    rowids = np.array([rowid(mem, i) for i in ("t1", "t2", "t3")], dtype=np.int64)
    assert mem.asks.of(rowids).tolist() == [1.0, 0.0, 0.0]
    query = "What was the best camping memory?"
    assert mem.search_sync(query, k=3)[0].id == "t2"
    # Without the weights the question itself comes first: the test measures the rule.
    monkeypatch.setattr(mem.asks, "of", lambda r: np.zeros(len(r), dtype=np.float32))
    assert mem.search_sync(query, k=3)[0].id == "t1"
    mem.close()


def test_ask_weights_survive_a_reopen_an_edit_a_delete_and_an_older_index(
        tmp_path: Path) -> None:
    emb = default_embedder()
    mem = open_memory(tmp_path, "t:asks", "hybrid", embedder=emb, background=False)
    assert isinstance(mem, HybridMemory)
    _session(mem)
    r1, r3 = rowid(mem, "t1"), rowid(mem, "t3")
    mem.close()

    mem = open_memory(tmp_path, "t:asks", "hybrid", embedder=emb, background=False)
    assert isinstance(mem, HybridMemory)
    assert mem.asks.of(np.array([r1, r3])).tolist() == [1.0, 0.0]
    mem.update_sync("t3", "Bo: Did you swim?")
    assert mem.asks.of(np.array([r3])).tolist() == [1.0]
    mem.delete_sync("t1")
    assert mem.asks.of(np.array([r1])).tolist() == [0.0]
    assert mem.catalog.conn.execute("SELECT count(*) FROM asks").fetchone()[0] == 1
    # An index from before the table weighs what it holds, once.
    mem.catalog.conn.execute("DROP TABLE asks")
    mem.asks.attach(mem.catalog.conn)
    assert mem.asks.of(np.array([r1, r3])).tolist() == [0.0, 1.0]
    mem.close()


def test_a_rowid_dropped_and_reused_in_one_scan_keeps_the_new_records_weight(
        tmp_path: Path) -> None:
    # A file moved to a folder scanned first: its old row is deleted and, being the
    # last rowid, given again to the moved file in the same transaction.
    mem = open_memory(tmp_path, "t:asks", "hybrid", embedder=default_embedder(),
                      background=False)
    assert isinstance(mem, HybridMemory)
    mem.write_sync("Ann: Shall we hike on Sunday?", kind="note", metadata={"id": "q1"})
    before = rowid(mem, "q1")
    (mem.group.path / "entities").mkdir(exist_ok=True)
    (mem.group.path / "notes" / "q1.md").rename(mem.group.path / "entities" / "q1.md")
    mem.catalog.refresh(full=True)
    assert rowid(mem, "q1") == before
    assert mem.asks.of(np.array([before])).tolist() == [1.0]
    # The same in one folder: a file deleted and another written by hand, one scan.
    (mem.group.path / "entities" / "q1.md").unlink()
    (mem.group.path / "entities" / "q2.md").write_text("Bo: Did you swim?\n")
    mem.catalog.refresh(full=True)
    assert rowid(mem, "q2") == before
    assert mem.asks.of(np.array([before])).tolist() == [1.0]
    mem.close()

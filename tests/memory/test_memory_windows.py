"""Episode window vectors: a turn embedded with its session neighbours, kept up to date."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memory_store import open_memory
from memory_store.backends.vector import VectorMemory
from memory_store.index import default_embedder

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
TURNS = [
    ("t1", "Ann: Did you go to the Coldplay concert?", T0),
    ("t2", "Bo: Yes! Last Saturday, it was amazing.", T0 + timedelta(minutes=1)),
    ("t3", "Ann: Lucky you, I missed it.", T0 + timedelta(minutes=2)),
    # Days later: another session, so no shared window with t3.
    ("t4", "Bo: My new job starts on Monday.", T0 + timedelta(days=3)),
]


def _open(path: Path) -> VectorMemory:
    mem = open_memory(path, "t:w", "vector", embedder=default_embedder())
    assert isinstance(mem, VectorMemory)
    return mem


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[VectorMemory]:
    m = _open(tmp_path)
    for mid, text, when in TURNS:
        m.write_sync(text, kind="episode", metadata={"id": mid, "created": when.isoformat()})
    m.flush()
    yield m
    m.close()


def _windows(mem: VectorMemory) -> dict[str, bytes]:
    mem.flush()  # windows are computed in the background
    rows = mem.catalog.conn.execute(
        "SELECT d.id, w.vec FROM wvecs w JOIN docs d ON d.rowid = w.rowid").fetchall()
    # Stored as float16; compared as float32.
    return {str(i): np.frombuffer(v, np.float16).astype(np.float32).tobytes()
            for i, v in rows}


def _vec(text: str) -> bytes:
    return np.ascontiguousarray(default_embedder().embed([text])[0],
                                dtype=np.float32).tobytes()


def _close(a: bytes, b: bytes) -> bool:
    return bool(np.allclose(np.frombuffer(a, np.float32), np.frombuffer(b, np.float32),
                            atol=2e-3))


def test_window_is_the_turn_with_its_session_neighbours(mem: VectorMemory) -> None:
    w = _windows(mem)
    t1, t2, t3, _ = (text for _, text, _ in TURNS)
    assert _close(w["t1"], _vec(f"{t1} {t2}"))
    assert _close(w["t2"], _vec(f"{t1} {t2} {t3}"))   # re-embedded when t3 arrived
    assert _close(w["t3"], _vec(f"{t2} {t3}"))         # t4 is in another session
    assert w["t4"] == b""                              # alone in its session


def test_deleting_a_turn_rewindows_its_neighbours(mem: VectorMemory) -> None:
    mem.delete_sync("t2")
    w = _windows(mem)
    t1, _, t3, _ = (text for _, text, _ in TURNS)
    assert "t2" not in w
    assert _close(w["t1"], _vec(f"{t1} {t3}"))
    assert _close(w["t3"], _vec(f"{t1} {t3}"))


def test_editing_a_turn_rewindows_its_neighbours(mem: VectorMemory) -> None:
    mem.update_sync("t2", "Bo: No, I stayed home.")
    t1, _, t3, _ = (text for _, text, _ in TURNS)
    assert _close(_windows(mem)["t1"], _vec(f"{t1} Bo: No, I stayed home."))
    assert _close(_windows(mem)["t3"], _vec(f"Bo: No, I stayed home. {t3}"))


def test_rebuilt_index_has_the_same_windows(tmp_path: Path, mem: VectorMemory) -> None:
    before = _windows(mem)
    mem.close()
    shutil.rmtree(mem.group.path / ".index")
    again = _open(tmp_path)
    try:
        # The first search indexes the files again.
        assert again.search_sync("Coldplay concert", k=1)[0].id in {"t1", "t2"}
        after = _windows(again)
        assert set(after) == set(before)
        for mid, vec in before.items():
            assert (vec == b"" and after[mid] == b"") or _close(vec, after[mid])
    finally:
        again.close()


def test_smoothing_does_not_cross_sessions(mem: VectorMemory) -> None:
    dense = mem.dense
    prev, nxt = dense._neighbour_positions()
    pos = {mid: dense.slot(int(mem.catalog.conn.execute(
        "SELECT rowid FROM docs WHERE id=?", (mid,)).fetchone()[0])) for mid, _, _ in TURNS}
    assert nxt[pos["t3"]] == pos["t3"]
    assert prev[pos["t4"]] == pos["t4"]
    assert nxt[pos["t1"]] == pos["t2"]

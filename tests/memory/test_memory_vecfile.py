"""Int8 vector files over mmap.mmap: release() drops resident pages, never data."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memory_store.vecfile import VecFile

DIM = 384
LINUX_MADVISE = sys.platform.startswith("linux") and hasattr(mmap, "MADV_DONTNEED")
needs_madvise = pytest.mark.skipif(not LINUX_MADVISE, reason="Linux MADV_DONTNEED only")


def _vecs(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _mapped(path: Path) -> dict[str, int]:
    """Resident kB of each mapping of ``path`` and its .scale (from /proc/self/smaps)."""
    out: dict[str, int] = {}
    name = None
    files = (str(path), str(path.with_suffix(".scale")))
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as fh:
        for line in fh:
            head = line.split()
            if head and not head[0].endswith(":"):  # a mapping's header (anonymous: 5 fields)
                name = head[5] if len(head) > 5 and head[5] in files else None
                if name:
                    out.setdefault(name, 0)
            elif name and head[0] == "Rss:":
                out[name] += int(head[1])
    return out


def _rss_file_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    pytest.skip("no RssFile in /proc/self/status")


def test_round_trip_after_release(tmp_path: Path) -> None:
    f = VecFile(tmp_path / "a.i8", DIM)
    v = _vecs(100)
    f.put(0, v)
    before = f.get(np.arange(100))
    dots = f.dot(v[3], 100)
    f.release()  # no flush first: the written rows are dirty pages
    np.testing.assert_array_equal(f.get(np.arange(100)), before)
    np.testing.assert_array_equal(f.dot(v[3], 100), dots)
    np.testing.assert_array_equal(f.dot_rows(v[3], np.array([3, 7])), dots[[3, 7]])
    assert np.abs(before - v).max() < 0.01
    f.put(100, v[:1])  # writable again after a release
    f.release()
    np.testing.assert_array_equal(f.get(np.array([100])), before[:1])
    f.close()


def test_growth_across_release_and_close_unmaps(tmp_path: Path) -> None:
    path = tmp_path / "g.i8"
    f = VecFile(path, DIM)
    first = f.capacity
    v = _vecs(first + 10)
    f.put(0, v[:first])
    f.release()
    old = f._maps
    f.put(first, v[first:])  # remaps: the old mapping must really be closed
    assert f.capacity > first
    assert old is not None and all(m.closed for m in old)
    f.release()
    np.testing.assert_allclose(f.get(np.arange(first + 10)), v, atol=0.01)
    f.flush()
    f.close()
    assert all(m.closed for m in old)
    if sys.platform.startswith("linux"):
        assert _mapped(path) == {}
    g = VecFile(path, DIM)  # reopened from the file
    np.testing.assert_allclose(g.get(np.arange(first + 10)), v, atol=0.01)
    g.drop()
    assert g.capacity == first and not g.get(np.arange(3)).any()
    g.close()


def test_another_process_sees_rows_put_before_release(tmp_path: Path) -> None:
    path = tmp_path / "p.i8"
    f = VecFile(path, DIM)
    v = _vecs(50, seed=3)
    f.put(0, v)
    want = f.get(np.arange(50))
    f.release()  # neither flushed nor closed
    np.save(tmp_path / "want.npy", want)
    code = textwrap.dedent(f"""
        import numpy as np
        from pathlib import Path
        from memory_store.vecfile import VecFile
        g = VecFile(Path({str(path)!r}), {DIM})
        want = np.load({str(tmp_path / "want.npy")!r})
        assert (g.get(np.arange(50)) == want).all()
        g.put(50, want[:2])
        g.release()
        g.close()
        """)
    root = str(Path(__file__).resolve().parents[2])  # this checkout's memory_store
    env = {**os.environ, "PYTHONPATH": root}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env=env)
    np.testing.assert_array_equal(f.get(np.arange(50)), want)
    np.testing.assert_array_equal(f.get(np.arange(50, 52)), want[:2])  # its write, here
    f.close()


@needs_madvise
def test_release_gives_back_the_touched_pages(tmp_path: Path) -> None:
    path = tmp_path / "big.i8"
    rows = 64 * 2**20 // DIM  # a 64 MB file
    f = VecFile(path, DIM)
    block = _vecs(4096)
    for start in range(0, rows, len(block)):
        f.put(start, block[: min(len(block), rows - start)])
    f.flush()
    f.release()
    base = _rss_file_kb()
    f.dot(block[0], rows)  # touches every page
    touched = _rss_file_kb()
    assert touched - base > 32 * 1024
    f.release()
    after = _rss_file_kb()
    assert touched - after > 32 * 1024, (base, touched, after)
    assert _mapped(path)[str(path)] < 1024
    np.testing.assert_allclose(f.get(np.array([0, rows - 1])),
                               block[[0, (rows - 1) % len(block)]], atol=0.01)
    f.close()


@needs_madvise
def test_reranked_search_leaves_no_sentence_pages_resident(tmp_path: Path) -> None:
    from memory_store import open_memory
    from memory_store.backends.vector import VectorMemory
    from memory_store.embed import default_embedder

    mem = open_memory(tmp_path, "test:vecfile", "vector", embedder=default_embedder(),
                      background=False)
    assert isinstance(mem, VectorMemory)
    try:
        for i in range(12):
            mem.write_sync(f"Note {i} mentions owls. Someone saw owls on day {i}.",
                           kind="fact", metadata={"id": f"n{i}"})
        mem.flush()
        assert mem.dense.cmat is not None and mem.dense.mat is not None
        chunks, dense = mem.dense.cmat.path, mem.dense.mat.path
        mem.dense.rerank = 4
        assert mem.search_sync("who saw owls", k=3)
        assert _mapped(chunks)[str(chunks)] == 0
        assert _mapped(dense)[str(dense)] > 0  # read fully every search: kept
    finally:
        mem.close()
    assert _mapped(chunks) == {} and _mapped(dense) == {}

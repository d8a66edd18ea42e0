"""Int8 vector files over mmap.mmap; dot_runs reads rows without mapping their pages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memory_store.index import VecFile

DIM = 384
needs_smaps = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="reads /proc/self/smaps")


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


def test_dot_runs_reads_what_put_wrote(tmp_path: Path) -> None:
    f = VecFile(tmp_path / "a.i8", DIM)
    v = _vecs(100)
    f.put(0, v)  # not flushed: the rows are dirty pages of the mapping
    dots = f.dot(v[3], 100)
    starts, counts = np.array([2, 5, 6, 40]), np.array([1, 1, 3, 2])  # 5,6 touch
    rows = np.array([2, 5, 6, 7, 8, 40, 41])
    np.testing.assert_array_equal(f.dot_runs(v[3], starts, counts), dots[rows])
    assert len(f.dot_runs(v[3], starts[:0], counts[:0])) == 0
    f.put(100, v[:1])
    np.testing.assert_array_equal(f.dot_runs(v[0], np.array([100]), np.array([1])),
                                  f.dot(v[0], 101)[[100]])
    f.close()


def test_growth_and_close_unmap(tmp_path: Path) -> None:
    path = tmp_path / "g.i8"
    f = VecFile(path, DIM)
    first = f.capacity
    v = _vecs(first + 10)
    f.put(0, v[:first])
    old = f._maps
    f.put(first, v[first:])  # remaps: the old mapping must really be closed
    assert f.capacity > first
    assert old is not None and all(m.closed for m in old)
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


def test_another_process_sees_rows_not_flushed(tmp_path: Path) -> None:
    path = tmp_path / "p.i8"
    f = VecFile(path, DIM)
    v = _vecs(50, seed=3)
    f.put(0, v)
    want = f.get(np.arange(50))  # neither flushed nor closed
    np.save(tmp_path / "want.npy", want)
    code = textwrap.dedent(f"""
        import numpy as np
        from pathlib import Path
        from memory_store.index._vecfile import VecFile
        g = VecFile(Path({str(path)!r}), {DIM})
        want = np.load({str(tmp_path / "want.npy")!r})
        assert (g.get(np.arange(50)) == want).all()
        assert (g.dot_runs(want[0], np.array([0]), np.array([50])) ==
                g.dot(want[0], 50)).all()
        g.put(50, want[:2])
        g.close()
        """)
    root = str(Path(__file__).resolve().parents[2])  # this checkout's memory_store
    env = {**os.environ, "PYTHONPATH": root}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env=env)
    np.testing.assert_array_equal(f.get(np.arange(50)), want)
    np.testing.assert_array_equal(f.get(np.arange(50, 52)), want[:2])  # its write, here
    f.close()


@needs_smaps
def test_dot_runs_leaves_the_rows_pages_out_of_the_resident_set(tmp_path: Path) -> None:
    path = tmp_path / "big.i8"
    rows = 64 * 2**20 // DIM  # a 64 MB file
    f = VecFile(path, DIM)
    block = _vecs(4096)
    for start in range(0, rows, len(block)):
        f.put(start, block[: min(len(block), rows - start)])
    f.flush()
    f.close()
    g = VecFile(path, DIM)  # a fresh mapping: nothing of the rows file resident
    assert _mapped(path)[str(path)] < 1024
    starts = np.arange(0, rows - 4, rows // 2000)  # a run on every 8th page or so
    got = g.dot_runs(block[0], starts, np.full(len(starts), 3))
    assert len(got) == 3 * len(starts)
    assert _mapped(path)[str(path)] < 1024  # read, not mapped
    g.dot(block[0], rows)  # a full scan does map every page
    assert _mapped(path)[str(path)] > 32 * 1024
    np.testing.assert_allclose(g.get(np.array([0, rows - 1])),
                               block[[0, (rows - 1) % len(block)]], atol=0.01)
    g.close()

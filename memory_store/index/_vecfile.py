"""Int8 vectors in a memory-mapped file: 384 bytes per vector instead of 1,536.

Each row is quantized symmetrically with its own scale (``row ~ scale * int8``), which
keeps a cosine within about 0.01 of the float value. The rows live in ``<name>.i8`` and
the scales in ``<name>.scale`` under ``.index/``; processes map the files rather than
copy them, so several workers that open the same group share one copy in the page
cache, and a group that sits idle costs no resident memory until it is searched.

The files are a cache of the float vectors kept in the catalog: a row is written here
before the transaction that references it commits, so a crash leaves at worst an
unreferenced row. :func:`dot` is exact integer arithmetic on SIMD (simsimd): a
million rows take about 15 ms on one core.

The files are mapped with :class:`mmap.mmap` (shared, read-write) and the arrays are
``np.frombuffer`` views of it. :meth:`VecFile.dot_runs` reads scattered rows with
``pread`` instead, so the pages a reranked search reads stay out of the resident set.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt
import simsimd

Int8s = npt.NDArray[np.int8]
Floats = npt.NDArray[np.float32]
_GROW = 4096  # rows added at a time, so appends rarely remap


def quantize(vecs: npt.NDArray[np.floating]) -> tuple[Int8s, Floats]:
    """(int8 rows, float32 scale per row) with ``vecs ~ scale[:, None] * rows``."""
    v = np.asarray(vecs, dtype=np.float32).reshape(len(vecs), -1)
    peak = np.abs(v).max(axis=1) if v.size else np.zeros(len(v), np.float32)
    scale = (np.where(peak > 0, peak, 1.0) / 127.0).astype(np.float32)
    rows = np.clip(np.rint(v / scale[:, None]), -127, 127).astype(np.int8)
    return rows, scale


def _dot(query: npt.NDArray[np.floating], rows: Int8s, scales: Floats) -> Floats:
    """Approximate ``rows @ query``: exact integer dot products with the query quantized
    too, each scaled back by its row's scale and the query's."""
    q8, qs = quantize(np.asarray(query, dtype=np.float32).reshape(1, -1))
    raw = np.asarray(simsimd.cdist(q8, rows, metric="dot", out_dtype="float32"),
                     dtype=np.float32).reshape(-1)
    scale = np.asarray(scales, dtype=np.float32) * qs[0]
    out: Floats = (raw * scale).astype(np.float32, copy=False)
    return out


class VecFile:
    """A growable file of int8 rows plus their scales, mapped read-write."""

    def __init__(self, path: Path, dim: int) -> None:
        self.path = Path(path)
        self.dim = dim
        self._maps: tuple[mmap.mmap, mmap.mmap] | None = None
        self._fd: int | None = None  # the rows' file, for dot_runs' reads
        self._rows: Int8s | None = None
        self._scale: Floats | None = None
        self.capacity = 0
        self._map(self._file_rows())

    @property
    def scale_path(self) -> Path:
        return self.path.with_suffix(".scale")

    def _file_rows(self) -> int:
        try:
            return os.stat(self.path).st_size // self.dim
        except FileNotFoundError:
            return 0

    def _map(self, rows: int) -> None:
        rows = max(rows, _GROW)
        for path, width in ((self.path, self.dim), (self.scale_path, 4)):
            with open(path, "ab") as fh:
                if fh.tell() < rows * width:
                    fh.truncate(rows * width)
        self.close()
        maps: list[mmap.mmap] = []
        for path, width in ((self.path, self.dim), (self.scale_path, 4)):
            with open(path, "r+b") as fh:  # mmap keeps its own duplicate of the fd
                maps.append(mmap.mmap(fh.fileno(), rows * width, access=mmap.ACCESS_WRITE))
        self._maps = (maps[0], maps[1])
        self._fd = os.open(self.path, os.O_RDONLY)
        self._rows = np.frombuffer(maps[0], dtype=np.int8).reshape(rows, self.dim)
        self._scale = np.frombuffer(maps[1], dtype=np.float32)
        self.capacity = rows

    def ensure(self, rows: int) -> None:
        """Make room for rows ``0 .. rows-1``."""
        if rows > self.capacity:
            self._map(max(rows, self.capacity * 2) + _GROW)

    def put(self, start: int, vecs: npt.NDArray[np.floating]) -> None:
        """Quantize ``vecs`` into rows ``start ..``."""
        if not len(vecs):
            return
        self.ensure(start + len(vecs))
        assert self._rows is not None and self._scale is not None
        q, s = quantize(vecs)
        self._rows[start : start + len(vecs)] = q
        self._scale[start : start + len(vecs)] = s

    def get(self, idx: npt.NDArray[np.int64]) -> Floats:
        """Rows ``idx`` back as float32 (approximately the vectors put there)."""
        assert self._rows is not None and self._scale is not None
        out: Floats = (self._rows[idx].astype(np.float32)
                       * self._scale[idx, None]).astype(np.float32)
        return out

    def dot(self, query: npt.NDArray[np.floating], n: int) -> Floats:
        """Approximate ``rows[:n] @ query`` for a unit-length float ``query``."""
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        assert self._rows is not None and self._scale is not None
        return _dot(query, self._rows[:n], self._scale[:n])

    def dot_runs(self, query: npt.NDArray[np.floating], starts: npt.NDArray[np.int64],
                 counts: npt.NDArray[np.int64]) -> Floats:
        """Approximate ``rows[r] @ query`` for the rows of each run ``starts[i] ..
        starts[i] + counts[i] - 1``, in that order. The rows are read with ``pread``, not
        through the mapping: a reranked search reads a different thousand records'
        sentences each time, and mapped pages would add up to the whole file in the
        process's resident set; read, they stay in the page cache only (the one every
        process shares; on Linux it also holds what ``put`` wrote through the mapping).
        Runs that touch are read in one call (pass them in file order)."""
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.float32)
        assert self._rows is not None and self._scale is not None and self._fd is not None
        buf = bytearray(total * self.dim)
        view = memoryview(buf)
        width, at = self.dim, 0
        first = [int(x) for x in starts]
        sizes = [int(x) for x in counts]
        i = 0
        while i < len(first):
            begin, n = first[i], sizes[i]
            while i + 1 < len(first) and first[i + 1] == begin + n:  # adjacent: one read
                i += 1
                n += sizes[i]
            os.preadv(self._fd, [view[at * width : (at + n) * width]], begin * width)
            at += n
            i += 1
        got = np.frombuffer(buf, dtype=np.int8).reshape(total, self.dim)
        rows = np.repeat(starts, counts) + (np.arange(total) - np.repeat(
            np.cumsum(counts) - counts, counts))
        return _dot(query, got, self._scale[rows])

    def flush(self) -> None:
        if self._maps is not None:
            for m in self._maps:
                m.flush()

    def close(self) -> None:
        # Views first: mmap.close() raises BufferError while an array over it exists.
        self._rows = None
        self._scale = None
        maps, self._maps = self._maps, None
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        for m in maps or ():
            # BufferError: a view made by a caller is still alive (none in memory_store
            # keeps one); the mapping then goes when the last view does, as np.memmap's.
            with contextlib.suppress(BufferError):
                m.close()

    def drop(self) -> None:
        """Delete the files (the index is rebuilt from the catalog)."""
        self.close()
        for path in (self.path, self.scale_path):
            path.unlink(missing_ok=True)
        self.capacity = 0
        self._map(0)

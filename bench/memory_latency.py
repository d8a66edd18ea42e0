"""Memory latency benchmark: search and write latency, index rebuild, resident memory.

    python -m bench.memory_latency [--sizes 10000,100000,1000000] [--backends file,vector,hybrid]
                                   [--queries 200] [--writes 100] [--json]
                                   [--lexical-budget N]

For each size the synthetic group of N memories (``bench/corpus.py``, fixed by seed) is
generated as files. Then for each backend: one process rebuilds the index from the
files and, for vector/hybrid, embeds every record (throughput: ``rebuild_per_s``); a
fresh process measures, after loading the model, its resident memory, opens the group
(``open_ms``), times Q searches end to end (``await mem.search(q, k=10)``: change
detection, query embedding with the real model, ranking, records), measures its
resident memory again (``rss_mb`` is the difference: what one open group adds, mapped
vector pages included), then times W durable writes (``await mem.write()``: the reply
path; vectors follow in the background), each right after a bare durable write of a
small file to the same disk (``write_floor_*``: the fsync cost the disk imposes at that
moment, the baseline a write's time is read against); for the file backend it also reruns the
queries with the full BM25 OR-query (``exact_top10_overlap``: how much of its top 10
the pruned query of ``memory_store/ranking/_lexplan.py`` returns). ``--lexical-budget
1000000000000`` measures the full OR-query instead (the code before the pruning). The
vector backend is skipped above 100,000
(``--vector-max``): at a million the dense half is measured through hybrid.

Embedding a million texts with the real model would take hours here, so *corpus*
vectors come from a pool: the first 1,000 corpus texts embedded with the real model,
and every corpus text reuses the pool vector its hash picks. Queries and timed writes
are embedded live. ``embed_per_s`` is the real model's throughput in texts per second
at batch ``embed_batch`` (what the background filler uses) and at batch 1.

``--json``: the last line is one JSON object
``{"file": {"10000": {"search_p50_ms": .., "search_p95_ms": .., "write_p95_ms": ..,
"rss_mb": .., ..}, ...}, "vector": {...}, "hybrid": {...}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import corpus

GROUP = "bench:latency"
POOL = 1000
BATCH = 64


class PoolEmbedder:
    """Real model for queries and new writes; a pool vector for every corpus text."""

    def __init__(self, real: Any, cache: Path) -> None:
        self.real = real
        self.dim = real.dim
        self.model_id = f"pool:{real.model_id}"
        if cache.exists():
            self.pool = np.load(cache)
        else:
            self.pool = real.embed([it.content for it in corpus.items(POOL)])
            np.save(cache, self.pool)
        self.live = False  # set once the corpus is embedded: writes use the model

    def embed(self, texts: Sequence[str]) -> Any:
        if self.live:
            return self.real.embed(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            h = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            out[i] = self.pool[h % len(self.pool)]
        return out


def generate(data: Path, n: int) -> None:
    """N memory files in the group dir, written directly (no fsync) for speed."""
    from memory_store import MemoryRecord
    from memory_store.files import GroupDirectory, memory_path, render_memory_file

    gd = GroupDirectory(data, GROUP).ensure()
    for it in corpus.items(n):
        rec = MemoryRecord(id=it.id, kind=it.kind, content=it.content,
                           source=f"bench:msg/{it.id}", created=it.created,
                           updated=it.created, trust=it.trust)
        path = memory_path(gd.path, it.kind, rec.id, it.created)
        path.parent.mkdir(exist_ok=True)
        path.write_text(render_memory_file(rec), encoding="utf-8")


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return round(ordered[idx], 3)


def _options(data: Path, backend: str) -> dict[str, Any]:
    if backend == "file":
        return {}
    from memory_store.index import default_embedder

    return {"embedder": PoolEmbedder(default_embedder(), data / "pool.npy")}


def build(data: Path, backend: str) -> dict[str, Any]:
    """Rebuild the index from the files and embed everything (one process)."""
    from memory_store import open_memory

    mem = open_memory(data, GROUP, backend, **_options(data, backend))
    try:
        t0 = time.perf_counter()
        indexed = mem.reindex()
        mem.flush()
        rebuild_s = time.perf_counter() - t0
    finally:
        mem.close()
    return {"memories": indexed, "rebuild_s": round(rebuild_s, 2),
            "rebuild_per_s": round(indexed / rebuild_s, 1) if rebuild_s else None}


def embed_rate(real: Any, batch: int) -> float:
    texts = [it.content for it in corpus.items(4 * BATCH, seed=99)]
    real.embed(texts[:8])  # warm-up
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        real.embed(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - t0)


def durable_floor_ms(path: Path, size: int) -> float:
    """What any durable write of one small file costs on this disk right now (temp file,
    fsync, rename, folder fsync, as ``memory_store.files._atomic`` does): the same-run baseline
    a memory write's time is read against, since the shared disk's fsync latency moves
    by an order of magnitude with other work on the machine."""
    from memory_store.files import atomic_write_bytes

    t0 = time.perf_counter()
    atomic_write_bytes(path, b"x" * size, durable=True)
    return (time.perf_counter() - t0) * 1000


async def measure(data: Path, backend: str, n_queries: int, n_writes: int,
                  lexical_budget: int | None = None) -> dict[str, Any]:
    from memory_store import open_memory

    options = _options(data, backend)
    result: dict[str, Any] = {}
    if options:
        real = options["embedder"].real
        result["embed_batch"] = BATCH
        result["embed_per_s"] = round(embed_rate(real, BATCH), 1)
        result["embed_per_s_batch1"] = round(embed_rate(real, 1), 1)
        options["embedder"].live = True
    base = rss_mb()
    t0 = time.perf_counter()
    mem = open_memory(data, GROUP, backend, **options)
    result["open_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    planner = mem.catalog.planner
    if lexical_budget is not None:
        planner.budget = lexical_budget
    try:
        qs = corpus.queries(n_queries)
        for q in qs[:5]:  # warm caches (first search after open, model warm-up)
            await mem.search(q, k=10)
        search_ms = []
        for q in qs:
            t0 = time.perf_counter()
            await mem.search(q, k=10)
            search_ms.append((time.perf_counter() - t0) * 1000)
        result["rss_mb"] = round(rss_mb() - base, 1)
        result["rss_total_mb"] = round(rss_mb(), 1)
        result["lexical_budget"] = planner.budget
        if backend == "file":  # the pruned top 10 against the full OR-query's
            pruned = [[h.id for h in await mem.search(q, k=10)] for q in qs]
            planner.budget, budget = 10**12, planner.budget
            full = [[h.id for h in await mem.search(q, k=10)] for q in qs]
            planner.budget = budget
            result["exact_top10_overlap"] = round(statistics.fmean(
                len(set(a) & set(b)) / len(b) if b else float(not a)
                for a, b in zip(pruned, full, strict=True)), 4)
        write_ms, floor_ms = [], []
        floor_dir = data / "write-floor"
        floor_dir.mkdir(exist_ok=True)
        for i in range(n_writes):
            text = (f"{random.choice(corpus._NAMES)} said the meeting moved to room {i}"
                    f" on {i % 28 + 1} May")
            floor_ms.append(durable_floor_ms(floor_dir / f"f{i}.md", 600))
            t0 = time.perf_counter()
            await mem.write(text, kind="episode", metadata={"id": f"w{i}", "source": "bench"})
            write_ms.append((time.perf_counter() - t0) * 1000)
        shutil.rmtree(floor_dir, ignore_errors=True)
        result.update({
            "search_p50_ms": pct(search_ms, 50),
            "search_p95_ms": pct(search_ms, 95),
            "search_mean_ms": round(statistics.fmean(search_ms), 3),
            "write_p50_ms": pct(write_ms, 50),
            "write_p95_ms": pct(write_ms, 95),
            "write_floor_p50_ms": pct(floor_ms, 50),
            "write_floor_p95_ms": pct(floor_ms, 95),
        })
        return result
    finally:
        mem.close()
        for path in mem.group.memory_files():  # keep the corpus the same for the next one
            if path.name.startswith("w") and path.name[1:-3].isdigit():
                path.unlink()


def cache_sim(groups: int = 40, per_group: int = 500, turns: int = 2000,
              max_groups: int = 16, backend: str = "file") -> dict[str, Any]:
    """A worker's open-group cache under Zipf-distributed traffic: each turn gets its
    group's memory from :class:`MemoryCache` and searches it once."""
    from memory_store import MemoryCache, MemoryRecord
    from memory_store.files import GroupDirectory, memory_path, render_memory_file

    tmp = Path(tempfile.mkdtemp(prefix="memcache-"))
    try:
        items = list(corpus.items(per_group))
        for g in range(groups):
            gd = GroupDirectory(tmp, f"bench:g{g}").ensure()
            for it in items:
                rec = MemoryRecord(id=it.id, kind=it.kind, content=it.content, source="b",
                                   created=it.created, updated=it.created, trust=it.trust)
                path = memory_path(gd.path, it.kind, it.id, it.created)
                path.parent.mkdir(exist_ok=True)
                path.write_text(render_memory_file(rec), encoding="utf-8")
        rng = random.Random(corpus.SEED)
        weights = [1 / (g + 1) for g in range(groups)]
        qs = corpus.queries(64)
        cache = MemoryCache(max_groups=max_groups)
        hit_ms: list[float] = []
        miss_ms: list[float] = []
        for g in range(groups):  # every group indexed once, so a miss is an open, not a build
            cache.get(tmp, f"bench:g{g}", backend)[1].search_sync("warm", k=1)
        cache.stats.hits = cache.stats.misses = cache.stats.evictions = 0
        peak = 0
        for t in range(turns):
            g = rng.choices(range(groups), weights)[0]
            misses = cache.stats.misses
            t0 = time.perf_counter()
            _, mem = cache.get(tmp, f"bench:g{g}", backend)
            mem.search_sync(qs[t % len(qs)], k=10)
            (miss_ms if cache.stats.misses > misses else hit_ms).append(
                (time.perf_counter() - t0) * 1000)
            peak = max(peak, cache.footprint_bytes())
        cache.close()
        return {"groups": groups, "per_group": per_group, "turns": turns,
                "max_groups": max_groups, "hit_rate": round(cache.stats.hit_rate, 3),
                "evictions": cache.stats.evictions,
                "hit_p50_ms": pct(hit_ms, 50), "hit_p95_ms": pct(hit_ms, 95),
                "miss_p50_ms": pct(miss_ms, 50), "miss_p95_ms": pct(miss_ms, 95),
                "peak_footprint_mb": round(peak / 2**20, 1)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(env: dict[str, str], *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.memory_latency", *args], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return {"error": proc.stderr.strip()[-300:]}
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.memory_latency",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--backends", default="file,vector,hybrid")
    ap.add_argument("--vector-max", type=int, default=100_000,
                    help="largest size the vector backend is measured at")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lexical-budget", type=int, default=None,
                    help="memory_store.ranking._lexplan budget (10**12: the full OR-query, "
                         "as before)")
    ap.add_argument("--cache", action="store_true",
                    help="instead: the open-group cache under Zipf traffic (hit rate, latency)")
    ap.add_argument("--build", nargs=2, metavar=("DATA", "BACKEND"), help=argparse.SUPPRESS)
    ap.add_argument("--one", nargs=2, metavar=("DATA", "BACKEND"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build:
        print(json.dumps(build(Path(args.build[0]), args.build[1])))
        return 0
    if args.cache:
        print(json.dumps(cache_sim()))
        return 0
    if args.one:
        res = asyncio.run(measure(Path(args.one[0]), args.one[1], args.queries, args.writes,
                                  args.lexical_budget))
        print(json.dumps(res))
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results: dict[str, dict[str, Any]] = {b: {} for b in backends}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for size in sizes:
        tmp = Path(tempfile.mkdtemp(prefix=f"memlat-{size}-"))
        try:
            t0 = time.perf_counter()
            generate(tmp, size)
            print(f"[{size}] generated files in {time.perf_counter() - t0:.1f}s",
                  file=sys.stderr)
            for backend in backends:
                if backend == "vector" and size > args.vector_max:
                    continue
                # Fresh processes: the build's heap does not inflate the measured RSS.
                res = _run(env, "--build", str(tmp), backend)
                if "error" not in res:
                    budget = ([] if args.lexical_budget is None
                              else ["--lexical-budget", str(args.lexical_budget)])
                    res.update(_run(env, "--one", str(tmp), backend, "--queries",
                                    str(args.queries), "--writes", str(args.writes), *budget))
                results[backend][str(size)] = res
                if "error" in res:
                    continue
                print(f"[{size}] {backend:<6} search p50 {res['search_p50_ms']:7.2f} ms  "
                      f"p95 {res['search_p95_ms']:7.2f} ms  write p95 {res['write_p95_ms']:7.2f}"
                      f" ms (floor {res['write_floor_p95_ms']:.2f})"
                      f"  rebuild {res['rebuild_per_s']}/s  rss {res['rss_mb']} MB"
                      f"  load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print("backend  size     search_p50_ms  search_p95_ms  write_p95_ms  floor_p95  rebuild/s"
          "  rss_MB")
    for backend, by_size in results.items():
        for size_key, r in by_size.items():
            if "error" in r:
                print(f"{backend:<8} {size_key:<8} error")
                continue
            print(f"{backend:<8} {size_key:<8} {r['search_p50_ms']:>13} {r['search_p95_ms']:>14} "
                  f"{r['write_p95_ms']:>13} {r['write_floor_p95_ms']:>10} {r['rebuild_per_s']:>10}"
                  f" {r['rss_mb']:>7}")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

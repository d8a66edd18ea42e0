"""Memory latency benchmark: search and write latency, index rebuild, resident memory.

    python -m bench.memory_latency [--sizes 1000,10000,100000] [--backends file,vector,hybrid]
                                   [--queries 200] [--writes 100] [--json]

For each size a synthetic group of N memories is generated as files (templated
sentences about people, places and things, spread over two years), then for each
backend, in a fresh process: the index is rebuilt from the files (throughput), Q
searches are timed end to end (``await mem.search(q, k=10)``: change detection, query
embedding with the real model, ranking, records), then W writes through
``await mem.write()`` (durable: fsync file and directory).

Embedding 100k texts with the real model takes ~30 min on two shared cores, so the
*corpus* vectors come from a pool: the corpus is built from 1,000 distinct sentences,
each embedded once with the real model, and a memory "<sentence> #<n>" reuses its
sentence's vector. Queries and the timed writes are embedded live by the real model.
The real embedding throughput is reported separately (``embed_per_s``).

``--json``: the last line is one JSON object
``{"file": {"10000": {"search_p50_ms": .., "search_p95_ms": .., "write_p95_ms": ..,
..}, ...}, "vector": {...}, "hybrid": {...}}``.
"""

from __future__ import annotations

import argparse
import asyncio
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

GROUP = "bench:latency"
POOL = 1000
_NAMES = ["Alice", "Bob", "Carol", "Dan", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy",
          "Mallory", "Niaj", "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter",
          "Yara"]
_VERBS = ["visited", "talked about", "bought", "painted", "planned a trip to", "wrote about",
          "cooked dinner in", "lost a wallet in", "started a project on", "went running in",
          "took photos of", "read a book about", "fixed a bike in", "adopted a cat in"]
_THINGS = ["Paris", "the lake house", "the quarterly report", "a vintage guitar", "Kyoto",
           "the new office", "a community garden", "the robotics club", "a pottery class",
           "the mountain cabin", "an old sailboat", "the city library", "a jazz concert",
           "the farmers market", "a chess tournament", "the science museum"]
_WHY = ["with friends", "for the first time", "after work", "on a rainy weekend",
        "because it was cheap", "to celebrate a birthday", "with the kids", "alone"]


def pool_sentences(seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < POOL:
        out.add(f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_THINGS)} "
                f"{rng.choice(_WHY)}")
    return sorted(out)


def queries(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    forms = ["what did {n} do in {t}", "when did {n} visit {t}", "who {v} {t}",
             "{n} {t}", "tell me about {t} and {n}"]
    return [rng.choice(forms).format(n=rng.choice(_NAMES), t=rng.choice(_THINGS),
                                     v=rng.choice(_VERBS)) for _ in range(n)]


class PoolEmbedder:
    """Real model for anything new; cached pool vectors for "<pool sentence> #<n>"."""

    def __init__(self, real: Any, sentences: list[str], cache: Path) -> None:
        self.real = real
        self.dim = real.dim
        self.model_id = f"pool:{real.model_id}"
        if cache.exists():
            vecs = np.load(cache)
        else:
            vecs = real.embed(sentences)
            np.save(cache, vecs)
        self.pool = {s: vecs[i] for i, s in enumerate(sentences)}

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        todo = []
        for i, text in enumerate(texts):
            vec = self.pool.get(text.split(" #", 1)[0])
            if vec is None:
                todo.append(i)
            else:
                out[i] = vec
        if todo:
            out[todo] = self.real.embed([texts[i] for i in todo])
        return out


def generate(data: Path, n: int) -> None:
    """N memory files in the group dir, written directly (no fsync) for speed."""
    from memory_store.fileformat import render
    from memory_store.group import GroupDirectory
    from memory_store.paths import memory_path
    from memory_store.protocol import MemoryRecord

    gd = GroupDirectory(data, GROUP).ensure()
    sentences = pool_sentences()
    rng = random.Random(n)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    kinds = ["episode"] * 8 + ["fact", "procedure"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        created = start + timedelta(minutes=rng.randrange(2 * 365 * 24 * 60))
        rec = MemoryRecord(id=f"m{i:06d}", kind=kind, content=f"{sentences[i % POOL]} #{i}",
                           source=f"bench:msg/{i}", created=created, updated=created,
                           trust=round(rng.uniform(0.3, 1.0), 2))
        memory_path(gd.path, kind, rec.id).write_text(render(rec), encoding="utf-8")


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


async def measure(data: Path, backend: str, n: int, n_queries: int,
                  n_writes: int) -> dict[str, Any]:
    from memory_store import open_memory

    options: dict[str, Any] = {}
    if backend != "file":
        from memory_store.embed import default_embedder

        real = default_embedder()
        options["embedder"] = PoolEmbedder(real, pool_sentences(), data / "pool.npy")
        texts = [f"{s} and then some more words about it" for s in pool_sentences()[:64]]
        t0 = time.perf_counter()
        real.embed(texts)
        embed_per_s = len(texts) / (time.perf_counter() - t0)
    mem = open_memory(data, GROUP, backend, **options)
    try:
        t0 = time.perf_counter()
        indexed = mem.reindex()
        rebuild_s = time.perf_counter() - t0
        qs = queries(n_queries)
        for q in qs[:5]:  # warm caches (first search after open, model warm-up)
            await mem.search(q, k=10)
        search_ms = []
        for q in qs:
            t0 = time.perf_counter()
            await mem.search(q, k=10)
            search_ms.append((time.perf_counter() - t0) * 1000)
        write_ms = []
        for i in range(n_writes):
            text = f"{random.choice(_NAMES)} said the meeting moved to room {i} on {i % 28 + 1} May"
            t0 = time.perf_counter()
            await mem.write(text, kind="episode", metadata={"id": f"w{i}", "source": "bench"})
            write_ms.append((time.perf_counter() - t0) * 1000)
        result: dict[str, Any] = {
            "memories": indexed,
            "search_p50_ms": pct(search_ms, 50),
            "search_p95_ms": pct(search_ms, 95),
            "search_mean_ms": round(statistics.fmean(search_ms), 3),
            "write_p50_ms": pct(write_ms, 50),
            "write_p95_ms": pct(write_ms, 95),
            "rebuild_s": round(rebuild_s, 2),
            "rebuild_per_s": round(indexed / rebuild_s, 1) if rebuild_s else None,
            "rss_mb": round(rss_mb(), 1),
        }
        if backend != "file":
            result["embed_per_s"] = round(embed_per_s, 1)
        return result
    finally:
        mem.close()
        for i in range(n_writes):  # keep the corpus the same size for the next backend
            for sub in ("episodes",):
                with_id = Path(mem.group.path / sub / f"w{i}.md")
                if with_id.exists():
                    with_id.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.memory_latency",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--backends", default="file,vector,hybrid")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", nargs=3, metavar=("DATA", "BACKEND", "SIZE"),
                    help=argparse.SUPPRESS)  # internal: one measurement in this process
    args = ap.parse_args(argv)
    if args.one:
        data, backend, size = Path(args.one[0]), args.one[1], int(args.one[2])
        res = asyncio.run(measure(data, backend, size, args.queries, args.writes))
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
                # A fresh process per measurement: honest RSS, no warm state carried over.
                proc = subprocess.run(
                    [sys.executable, "-m", "bench.memory_latency", "--one", str(tmp), backend,
                     str(size), "--queries", str(args.queries), "--writes", str(args.writes)],
                    env=env, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    results[backend][str(size)] = {"error": proc.stderr.strip()[-300:]}
                    continue
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                results[backend][str(size)] = res
                print(f"[{size}] {backend:<6} search p50 {res['search_p50_ms']:7.2f} ms  "
                      f"p95 {res['search_p95_ms']:7.2f} ms  write p95 {res['write_p95_ms']:7.2f}"
                      f" ms  rebuild {res['rebuild_per_s']}/s  rss {res['rss_mb']} MB",
                      file=sys.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print("backend  size     search_p50_ms  search_p95_ms  write_p95_ms  rebuild/s  rss_MB")
    for backend, by_size in results.items():
        for size_key, r in by_size.items():
            if "error" in r:
                print(f"{backend:<8} {size_key:<8} error")
                continue
            print(f"{backend:<8} {size_key:<8} {r['search_p50_ms']:>13} {r['search_p95_ms']:>14} "
                  f"{r['write_p95_ms']:>13} {r['rebuild_per_s']:>10} {r['rss_mb']:>7}")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

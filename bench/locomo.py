"""LoCoMo retrieval benchmark for the memory backends.

    python -m bench.locomo --data ../shared/data/locomo-dev.json --backend hybrid [--json]

Replays each LoCoMo conversation into a fresh group with ``Memory.write()`` (one
episode per dialog turn, the turn's ``dia_id`` in its id and source, the session date
as its time), then for every question with evidence runs ``search(question, k=50)``
and reports recall@5/10/25/50 as the LoCoMo paper defines it: per question, the
fraction of its gold evidence dia_ids among the top k, averaged over questions; overall
and per category. With ``--json`` the last line is one JSON object.

Held-out split: settings were tuned on the tuning conversations only (``--tune``,
default conv-26); the summary always reports the tuning part and the held-out rest
(``splits.tune``, ``splits.heldout``) next to the overall numbers, so a reader can see
whether the tuned settings generalize. ``--split heldout`` evaluates only the held-out
conversations (``tune`` only the tuning ones).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

KS = (5, 10, 25, 50)
#: Conversations used to choose and tune settings; everything else is held out.
TUNE_SAMPLES = ("conv-26",)
_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def normalize_evidence(raw: list[str]) -> list[str]:
    """Gold dia_ids, with the dataset's malformed entries fixed ("D8:6; D9:17",
    "D:11:26" -> "D8:6", "D9:17", "D11:26"), deduplicated in order."""
    out: list[str] = []
    for item in raw:
        for m in _DIA.finditer(str(item)):
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia not in out:
                out.append(dia)
    return out


def session_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> aware datetime (UTC; the dataset has no zone)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turns(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """Every dialog turn of a sample with its session time, in order."""
    conv = sample["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        when = session_time(conv[f"session_{n}_date_time"])
        for turn in conv[f"session_{n}"]:
            out.append({**turn, "when": when, "session": n})
        n += 1
    return out


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


async def run_sample(sample: dict[str, Any], backend: str, root: Path,
                     options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    from memory_store import open_memory

    sid = str(sample.get("sample_id", "conv"))
    mem = open_memory(root, f"locomo:{sid}", backend, durable=False, **options)
    try:
        t0 = time.perf_counter()
        all_turns = turns(sample)
        for turn in all_turns:
            await mem.write(turn_text(turn), kind="episode", metadata={
                "id": turn["dia_id"],
                "source": f"locomo:{sid}:{turn['dia_id']}",
                "created": turn["when"].isoformat(),
                "speaker": turn["speaker"],
                "participants": [turn["speaker"]],
                "trust": 0.8,
            })
        t_written = time.perf_counter()
        # Vectors are computed in the background; the questions come after the whole
        # conversation, by which time a live bot has embedded it: wait for that here.
        await asyncio.to_thread(mem.flush)
        t1 = time.perf_counter()
        results = []
        for qa in sample["qa"]:
            gold = normalize_evidence(qa.get("evidence") or [])
            if not gold:
                continue
            hits = await mem.search(str(qa["question"]), k=max(KS))
            ids = [h.id for h in hits]
            results.append({
                "sample": sid,
                "category": str(qa.get("category")),
                **{f"recall@{k}": len(set(gold) & set(ids[:k])) / len(gold) for k in KS},
            })
        t2 = time.perf_counter()
    finally:
        mem.close()
    timing = {"turns": len(all_turns), "write_s": t_written - t0,
              "embed_s": t1 - t_written, "questions": len(results),
              "search_s": t2 - t1}
    return results, timing


def summarize(backend: str, results: list[dict[str, Any]],
              tune: tuple[str, ...] = TUNE_SAMPLES) -> dict[str, Any]:
    """Recall overall, by category, and on the tuning vs held-out conversations."""
    summary = _summary(backend, results)
    summary["splits"] = {
        name: {k: v for k, v in _summary(backend, rows).items() if k != "backend"}
        for name, rows in (("tune", [r for r in results if r.get("sample") in tune]),
                           ("heldout", [r for r in results if r.get("sample") not in tune]))
    }
    summary["tune_samples"] = list(tune)
    return summary


def _summary(backend: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(rows: list[dict[str, Any]], key: str) -> float:
        return round(sum(r[key] for r in rows) / len(rows), 4) if rows else 0.0

    by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_cat[r["category"]].append(r)
    return {
        "backend": backend,
        "questions": len(results),
        **{f"recall@{k}": mean(results, f"recall@{k}") for k in KS},
        "by_category": {
            cat: {"questions": len(rows), **{f"recall@{k}": mean(rows, f"recall@{k}")
                                             for k in KS}}
            for cat, rows in sorted(by_cat.items())
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    ap.add_argument("--backend", choices=["file", "vector", "hybrid"], default="hybrid")
    ap.add_argument("--json", action="store_true", help="print one JSON object as last line")
    ap.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    ap.add_argument("--keep", type=Path, default=None, help="write groups here (kept)")
    ap.add_argument("--tune", default=",".join(TUNE_SAMPLES),
                    help="comma-separated sample ids settings were tuned on (default: "
                         "%(default)s); the rest is reported as held out")
    ap.add_argument("--split", choices=["all", "tune", "heldout"], default="all",
                    help="which conversations to evaluate (default: all, reported per split)")
    args = ap.parse_args(argv)
    tune = tuple(t.strip() for t in args.tune.split(",") if t.strip())
    if not args.data.exists():
        print(f"LoCoMo data not found at {args.data}; skipping (see ../shared/data/README.md "
              "for where it comes from).", file=sys.stderr)
        if args.json:
            print(json.dumps({"backend": args.backend, "skipped": f"no data at {args.data}"}))
        return 0
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    if args.split != "all":
        samples = [s for s in samples
                   if (str(s.get("sample_id")) in tune) == (args.split == "tune")]
    if args.limit:
        samples = samples[: args.limit]
    from gateway.config import MemoryConfig

    # the ranking a worker runs with the default [memory.ranking]
    options: dict[str, Any] = MemoryConfig(backend=args.backend).backend_options()
    if args.backend != "file":
        from memory_store.index import default_embedder

        options["embedder"] = default_embedder()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        root = args.keep or Path(tmp)
        for sample in samples:
            rows, timing = asyncio.run(run_sample(sample, args.backend, root, options))
            results.extend(rows)
            print(f"{sample.get('sample_id')}: {timing['turns']} turns written in "
                  f"{timing['write_s']:.1f}s (+{timing['embed_s']:.1f}s background embedding), "
                  f"{timing['questions']} questions searched in "
                  f"{timing['search_s']:.1f}s", file=sys.stderr)
    summary = summarize(args.backend, results, tune)
    print(f"LoCoMo retrieval, backend={args.backend}, {summary['questions']} questions")
    print("          " + "  ".join(f"R@{k:<4}" for k in KS))
    print("overall   " + "  ".join(f"{summary[f'recall@{k}']:.3f}" for k in KS))
    for name, part in summary["splits"].items():
        if part["questions"]:
            print(f"{name:<9} " + "  ".join(f"{part[f'recall@{k}']:.3f}" for k in KS)
                  + f"   (n={part['questions']})")
    for cat, row in summary["by_category"].items():
        print(f"cat {cat:<5} " + "  ".join(f"{row[f'recall@{k}']:.3f}" for k in KS)
              + f"   (n={row['questions']})")
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""LoCoMo evidence inside the budgeted prompt: what the agent would really be shown.

    python -m bench.context --data ../shared/data/locomo-dev.json [--backend file|hybrid]
        [--budget 2000] [--json]

Replays each LoCoMo conversation into a fresh group exactly as ``bench.locomo`` does
(one episode per dialog turn, its ``dia_id`` as the record id; the group's core files
are the first-contact templates). Then each question with evidence is asked as one DM
message through the real ``TurnAgent`` (search, ``workers.budget.fit_memory``,
``build_prompt``), with a scripted model that only records the prompt it was sent. For
each question: the fraction of its gold evidence turns whose record is inside the memory
part of that prompt (``evidence_in_prompt``, averaged over questions as recall is), and
the WordPiece tokens of the memory part (the core blocks and the memory results block,
counted as ``workers.budget`` counts). The backend defaults to hybrid. With ``--json``
the last line is one JSON object: ``{"backend", "budget_tokens", "evidence_in_prompt",
"mean_memory_tokens", "max_memory_tokens", "by_category", "questions"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.locomo import normalize_evidence, turn_text, turns

_CORE = re.compile(r"<(operator_instructions|group_memory|user_profile) .*?</\1>", re.S)
_RESULTS = re.compile(r"<memory_search_results .*?</memory_search_results>", re.S)
_IDS = re.compile(r'<memory id="([^"]*)"')


def memory_part(instructions: str, user: str) -> str:
    """The memory part of a prompt: core blocks and the memory results block."""
    return "\n".join([m.group(0) for m in _CORE.finditer(instructions)]
                     + [m.group(0) for m in _RESULTS.finditer(user)])


async def run_sample(sample: dict[str, Any], backend: str, root: Path, budget: int,
                     options: dict[str, Any]) -> list[dict[str, Any]]:
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from channels.models import Inbound
    from gateway.config import ModelConfig
    from memory_store import GroupDirectory, open_memory
    from workers.agent import TurnAgent, TurnRequest
    from workers.budget import count_tokens

    seen: dict[str, str] = {}

    def capture(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["instructions"] = info.instructions or ""
        last = messages[-1]
        seen["user"] = "\n".join(str(p.content) for p in getattr(last, "parts", [])
                                 if isinstance(p, UserPromptPart))
        return ModelResponse(parts=[TextPart("ok")])

    sid = str(sample.get("sample_id", "conv"))
    group = f"locomo:{sid}"
    mem = open_memory(root, group, backend, durable=False, **options)
    gd = GroupDirectory(root, group)
    # The agent as the worker builds it for a remote model, with tools (their rules in
    # the prompt) and the configured budget; the model only records its prompt.
    agent = TurnAgent(FunctionModel(capture, model_name="capture"),
                      config=ModelConfig(provider="function", function="bench.context:none"),
                      memory_budget=budget)
    rows: list[dict[str, Any]] = []
    try:
        all_turns = turns(sample)
        for turn in all_turns:
            await mem.write(turn_text(turn), kind="episode", metadata={
                "id": turn["dia_id"], "source": f"locomo:{sid}:{turn['dia_id']}",
                "created": turn["when"].isoformat(), "speaker": turn["speaker"],
                "participants": [turn["speaker"]], "trust": 0.8,
            })
        # as bench.locomo does: a live bot embedded a conversation (in the background)
        # long before anyone asks about it
        await asyncio.to_thread(mem.flush)
        now = all_turns[-1]["when"] if all_turns else None
        for n, qa in enumerate(sample["qa"]):
            gold = normalize_evidence(qa.get("evidence") or [])
            if not gold or now is None:
                continue
            question = Inbound(channel="bench", chat_id=sid, is_group=False, sender_id="q",
                               sender_name="Reader", message_id=f"q{n}",
                               text=str(qa["question"]), received_at=now)
            await agent.run(TurnRequest(group=group, turn_id=f"q{n}", messages=[question],
                                        core=gd.core_memory(), memory=mem, now=now))
            part = memory_part(seen["instructions"], seen["user"])
            shown = set(_IDS.findall(part))
            rows.append({"sample": sid, "category": str(qa.get("category")),
                         "evidence": len(set(gold) & shown) / len(gold),
                         "tokens": count_tokens(part)})
    finally:
        mem.close()
    return rows


def summarize(backend: str, budget: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(items: list[dict[str, Any]], key: str) -> float:
        return round(sum(r[key] for r in items) / len(items), 4) if items else 0.0

    by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_cat[r["category"]].append(r)
    return {
        "backend": backend,
        "budget_tokens": budget,
        "evidence_in_prompt": mean(rows, "evidence"),
        "mean_memory_tokens": round(mean(rows, "tokens"), 1),
        "max_memory_tokens": max((r["tokens"] for r in rows), default=0),
        "by_category": {c: {"questions": len(v), "evidence_in_prompt": mean(v, "evidence")}
                        for c, v in sorted(by_cat.items())},
        "questions": len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.context",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    ap.add_argument("--backend", choices=["file", "vector", "hybrid"], default="hybrid")
    ap.add_argument("--budget", type=int, default=2000, help="memory budget, tokens")
    ap.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    ap.add_argument("--json", action="store_true", help="print the result as JSON last")
    args = ap.parse_args(argv)
    if not args.data.exists():
        print(f"LoCoMo data not found at {args.data}; skipping (see ../shared/data/README.md "
              "for where it comes from).", file=sys.stderr)
        if args.json:
            print(json.dumps({"skipped": f"no data at {args.data}"}))
        return 0
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    if args.limit:
        samples = samples[: args.limit]
    out: list[dict[str, Any]] = []
    for backend in [args.backend]:
        from gateway.config import MemoryConfig

        # the ranking a worker runs with the default [memory.ranking]
        options: dict[str, Any] = MemoryConfig(backend=backend).backend_options()
        if backend != "file":
            from memory_store.index import default_embedder

            options["embedder"] = default_embedder()
        rows: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory(prefix="context-") as tmp:
            for sample in samples:
                rows.extend(asyncio.run(run_sample(sample, backend, Path(tmp), args.budget,
                                                   options)))
        summary = summarize(backend, args.budget, rows)
        out.append(summary)
        print(f"{backend}: evidence in prompt {summary['evidence_in_prompt']:.3f} at "
              f"{args.budget} tokens (mean memory part {summary['mean_memory_tokens']:.0f} "
              f"tokens, {summary['questions']} questions); by category "
              + ", ".join(f"{c}: {v['evidence_in_prompt']:.3f}"
                          for c, v in summary["by_category"].items()), file=sys.stderr)
    if args.json:
        print(json.dumps(out[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

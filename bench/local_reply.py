"""A 60-token reply from the local model, timed with the real prompt at a prompt budget.

    python -m bench.local_reply [--models smollm2-135m-instruct,qwen2.5-coder-0.5b-instruct]
        [--budgets 512,384,256,128] [--runs 3] [--json]

The prompt is the one the worker sends: one turn through ``build_agent`` on a
``provider = "local"`` config (compact prompt, local memory budget) in a group whose
memory holds more than fits (a long ``CLAUDE.md`` and 60 remembered facts), after
twelve messages of group chatter (the batch's context), so the prompt is full. The chat
the model received (``LocalChat.last_chat``) is then cut to each budget with
``LocalChat.fit``, as ``DEFAULT_PROMPT_BUDGET`` would cut it, and replayed with 60
generated tokens forced (``ignore_eos``), the turn's sampling, and no prompt cache
(``cache_prompt: false``: every prompt token is processed, as in a chat's first turn).
A second replay per run changes only the last user line, with the cache on as the
worker has it: a later turn of the same chat, whose cached prefix llama.cpp reuses.

Runs are interleaved (each round times every model and budget once), so the machine's
load moves all rows alike; the baseline is the current default (the first model at
``DEFAULT_PROMPT_BUDGET``), measured in the same rounds. Reported per row: median
prompt tokens (llama.cpp's count), prompt-processing and generation seconds
(llama.cpp's timers), the wall time of the whole reply, the process's CPU seconds for
it (the work, which moves less with the machine's load than the wall time; not a
wall-time estimate: llama.cpp's two threads wait for each other, so even on idle cores
the wall time is well over half the CPU time), the later-turn reply, and
``/proc/loadavg`` at the start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.tryout import loadavg
from channels.models import Inbound
from gateway.config import parse_config, with_model_key
from memory_store import GroupDirectory, open_memory
from workers.agent import TurnRequest, build_agent
from workers.local_model import DEFAULT_PROMPT_BUDGET, LocalChat, LocalModel
from workers.local_weights import QWEN, SMOLLM2

GROUP = "local:reply-bench"
GEN_TOKENS = 60
QUESTION = "Tell me everything you know about our team, in detail."
LATER = "And what else should I know about the project?"
FACTS = [
    f"About our team ({i}): {who} {what}."
    for i, (who, what) in enumerate(
        (who, what)
        for who in ("Ana", "Ben", "Chen", "Dara", "Eli", "Fay")
        for what in ("leads the mobile app", "prefers tea over coffee", "joined in March",
                     "reviews every pull request", "works from Lisbon", "owns the billing "
                     "service", "is on call on Fridays", "writes the release notes",
                     "likes short meetings", "plays chess at lunch")
    )
]
#: what the group said since the bot last answered: the batch's context messages
CHATTER = ["Did anyone see the build failure on main this morning?",
           "Yes, it was the flaky upload test again, I restarted it.",
           "We should move the release to Thursday if the fix is not in by Wednesday.",
           "I can review the billing change after lunch, send me the link."]
NOTES = "# Team notes\n" + "".join(
    f"- Week {i}: the team shipped feature {i} and fixed {i + 2} bugs.\n" for i in range(40)
)


async def real_chat(model: str, budget: int) -> tuple[LocalChat, list[dict[str, str]]]:
    """The chat one real turn sent to ``model`` with a prompt budget of ``budget`` (the
    largest measured: a chat the default budget cut cannot grow back), and the engine."""
    settings = with_model_key(parse_config(
        {"model": {"provider": "local", "name": model, "max_tokens": GEN_TOKENS},
         "memory": {"backend": "file"}}, env={}), {})
    agent = build_agent(settings)
    wrapped = getattr(agent.model, "wrapped", agent.model)
    assert isinstance(wrapped, LocalModel), wrapped
    wrapped.engine.prompt_budget = budget
    with tempfile.TemporaryDirectory(prefix="local-reply-") as tmp:
        gd = GroupDirectory(Path(tmp), GROUP).ensure()
        gd.core_path.write_text(NOTES, encoding="utf-8")
        memory = open_memory(Path(tmp), GROUP)
        for i, fact in enumerate(FACTS):
            await memory.write(fact, kind="fact", metadata={
                "id": f"f{i}", "source": f"{GROUP}:msg/{i}", "trust": 1.0})
        said = [(f"u{i % 3}", CHATTER[i % len(CHATTER)]) for i in range(12)]
        messages = [
            Inbound(channel="local", chat_id="reply-bench", is_group=True, sender_id=who,
                    sender_name=who.upper(), message_id=str(i), text=text,
                    received_at=datetime.now(UTC))
            for i, (who, text) in enumerate([*said, ("me", QUESTION)])
        ]
        await agent.run(TurnRequest(group=GROUP, turn_id="reply-bench", messages=messages,
                                    core=gd.core_memory(), memory=memory,
                                    now=datetime.now(UTC)))
    wrapped.engine.prompt_budget = DEFAULT_PROMPT_BUDGET
    return wrapped.engine, list(wrapped.engine.last_chat)


def at_budget(engine: LocalChat, chat: list[dict[str, str]], budget: int) -> list[dict[str, str]]:
    """``chat`` as ``LocalChat.fit`` cuts it when the prompt budget is ``budget``."""
    kept = engine.prompt_budget
    engine.prompt_budget = budget
    try:
        return engine.fit(chat)
    finally:
        engine.prompt_budget = kept


def timed(engine: LocalChat, chat: list[dict[str, str]], *, cached: bool) -> dict[str, float]:
    """One forced 60-token reply to ``chat``: llama.cpp's timings and the wall time.
    ``cached``: whether the slot's cached prefix (and llama.cpp's RAM prompt cache) may
    be used, as in the worker; without it every prompt token is processed."""
    t0, cpu0 = time.perf_counter(), os.times()
    out = engine.request({"messages": chat, "max_tokens": GEN_TOKENS, "ignore_eos": True,
                          "temperature": engine.temperature, "seed": 0,
                          "cache_prompt": cached})
    wall, cpu1 = time.perf_counter() - t0, os.times()
    t = out["timings"]
    cpu = cpu1.user + cpu1.system - cpu0.user - cpu0.system
    return {"prompt_n": t["prompt_n"], "prompt_s": t["prompt_ms"] / 1000,
            "gen_n": t["predicted_n"], "gen_s": t["predicted_ms"] / 1000, "wall_s": wall,
            "cpu_s": cpu}


def run(models: list[str], budgets: list[int], runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"load_start": loadavg(), "rows": []}
    chats = {m: asyncio.run(real_chat(m, max(budgets))) for m in models}
    samples: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(runs):
        for model in models:
            engine, chat = chats[model]
            for budget in budgets:
                fitted = at_budget(engine, chat, budget)
                first = timed(engine, fitted, cached=False)
                # the turn as the worker sends it leaves its prompt in the slot's cache
                engine.request({"messages": fitted, "max_tokens": 1})
                later = at_budget(engine, [*chat[:-1], {"role": "user", "content": LATER}],
                                  budget)
                again = timed(engine, later, cached=True)
                first["later_wall_s"] = again["wall_s"]
                first["later_prompt_n"] = again["prompt_n"]
                first["load1"] = float(loadavg().split()[0])
                samples.setdefault((model, budget), []).append(first)
    for (model, budget), rows in samples.items():
        row: dict[str, Any] = {"model": model, "budget": budget, "runs": len(rows),
                               "baseline": model == models[0]
                               and budget == DEFAULT_PROMPT_BUDGET}
        for key in ("prompt_n", "prompt_s", "gen_n", "gen_s", "wall_s", "cpu_s",
                    "later_prompt_n", "later_wall_s", "load1"):
            row[key] = round(statistics.median(r[key] for r in rows), 2)
        out["rows"].append(row)
    out["load_end"] = loadavg()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=f"{SMOLLM2},{QWEN}")
    parser.add_argument("--budgets", default="512,384,256,128")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = run(args.models.split(","), [int(b) for b in args.budgets.split(",")], args.runs)
    print("| model | budget | prompt tokens | prompt s | gen tokens | gen s | 60-token reply s "
          "| CPU s | later turn: prompt tokens, s | load1 |")
    for r in out["rows"]:
        mark = " (baseline)" if r["baseline"] else ""
        print(f'| {r["model"]}{mark} | {r["budget"]} | {r["prompt_n"]:.0f} | {r["prompt_s"]} '
              f'| {r["gen_n"]:.0f} | {r["gen_s"]} | {r["wall_s"]} | {r["cpu_s"]} '
              f'| {r["later_prompt_n"]:.0f}, {r["later_wall_s"]} '
              f'| {r["load1"]} |')
    print(f'load {out["load_start"]} -> {out["load_end"]}')
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

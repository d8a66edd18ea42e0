"""The scripted try-out conversation: does the local model answer what a newcomer asks?

    python -m bench.tryout [--model qwen2.5-coder-0.5b-instruct] [--half tune|held|all]
        [--json]

Runs ``bench/tryout.toml`` (its header says how each turn is scored and which half is
held out) through the real turn path: ``build_agent`` on a ``provider = "local"``
config (the model class the worker uses, compact prompt, local prompt budget), one DM
per ``[[chat]]`` with its own file memory, each turn's episode written as the worker
writes it (``workers.turn.episode_text``) so later turns recall earlier ones through
memory search, as in a real chat. ``--model`` is a ``[model] name``: a bundled model or
a path to a ``.gguf`` file.

Prints each scored turn (pass/FAIL, seconds, the reply), then the score of each half and
each kind with ``/proc/loadavg`` at the start and the end; ``--json`` adds one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import tomllib
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from channels.models import Inbound
from gateway.config import parse_config, with_model_key
from memory_store import GroupDirectory, open_memory
from workers.agent import TurnRequest, build_agent
from workers.turn import Batch, episode_text

SCRIPT = Path(__file__).with_name("tryout.toml")
GROUP = "local:tryout"


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def passed(turn: dict[str, str], reply: str) -> bool:
    """The scoring rule of ``tryout.toml``: ``expect`` found, ``reject`` not found."""
    flags = re.IGNORECASE | re.MULTILINE
    if not re.search(turn["expect"], reply, flags):
        return False
    return not ("reject" in turn and re.search(turn["reject"], reply, flags))


async def run_chat(agent: Any, turns: list[dict[str, str]], data: Path,
                   chat_no: int) -> list[dict[str, Any]]:
    """One ``[[chat]]`` in a fresh memory; the scored turns' results."""
    gd = GroupDirectory(data, GROUP).ensure()
    memory = open_memory(data, GROUP)
    results: list[dict[str, Any]] = []
    for i, turn in enumerate(turns):
        message = Inbound(
            channel="local", chat_id="tryout", is_group=False, sender_id="me",
            # a neutral sender name: a name must come from what was said, not the header
            sender_name="Me", message_id=f"{chat_no}-{i}", text=turn["say"],
            received_at=datetime.now(UTC),
        )
        t0 = time.perf_counter()
        reply = await agent.run(TurnRequest(
            group=GROUP, turn_id=f"tryout-{chat_no}-{i}", messages=[message],
            core=gd.core_memory(), memory=memory, now=datetime.now(UTC),
        ))
        seconds = time.perf_counter() - t0
        text = reply.text or ""
        batch = Batch(group=GROUP, messages=[message], engaged_ids=[message.message_id],
                      raw=[])
        await memory.write(episode_text(batch, text or None), kind="episode", metadata={
            "id": batch.turn_id, "source": f"{GROUP}:msg/{message.message_id}",
            "message_ids": [message.message_id], "participants": ["Me (local:me)"],
            "trust": 1.0, "created": datetime.now(UTC).isoformat(),
        })
        if "expect" in turn:
            results.append({"kind": turn["kind"], "say": turn["say"], "reply": text,
                            "ok": passed(turn, text), "seconds": round(seconds, 2)})
    return results


async def run(model: str, half: str) -> dict[str, Any]:
    chats = tomllib.loads(SCRIPT.read_text(encoding="utf-8"))["chat"]
    settings = with_model_key(parse_config(
        {"model": {"provider": "local", "name": model, "max_tokens": 60},
         "memory": {"backend": "file"}}, env={}), {})
    agent = build_agent(settings)
    out: dict[str, Any] = {"model": model, "load_start": loadavg(), "turns": []}
    with tempfile.TemporaryDirectory(prefix="tryout-") as tmp:
        for n, chat in enumerate(chats):
            if half != "all" and chat["half"] != half:
                continue
            for result in await run_chat(agent, chat["turns"], Path(tmp) / str(n), n):
                result["half"] = chat["half"]
                out["turns"].append(result)
    out["load_end"] = loadavg()
    scores: dict[str, list[bool]] = defaultdict(list)
    for r in out["turns"]:
        for key in (r["half"], f'{r["half"]}/{r["kind"]}'):
            scores[key].append(r["ok"])
    out["scores"] = {k: f"{sum(v)}/{len(v)}" for k, v in sorted(scores.items())}
    seconds = sorted(r["seconds"] for r in out["turns"])
    out["median_turn_s"] = seconds[len(seconds) // 2] if seconds else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--half", choices=("tune", "held", "all"), default="all")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = asyncio.run(run(args.model, args.half))
    for r in out["turns"]:
        reply = " ".join(r["reply"].split())[:120]
        print(f'{"pass" if r["ok"] else "FAIL"} {r["half"]:4} {r["kind"]:9} '
              f'{r["seconds"]:6.1f}s  {r["say"][:50]!r} -> {reply!r}')
    print(f'model {out["model"]}: {out["scores"]}; median turn {out["median_turn_s"]} s; '
          f'load {out["load_start"]} -> {out["load_end"]}')
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory-poisoning red team: attack success per class under a fully fooled model.

    python -m bench.redteam [--json] [--locomo ../shared/data/locomo-dev.json] [--no-recall]
                            [--tools-only]

Runs every scenario of ``tests/redteam`` (the main set, the held-out set and the benign
requests) through the real turn code with the compromised scripted model, judges each by
the issue's rules (``tests/redteam/harness.py``), and prints the issue's JSON shape as
the last line with ``--json``. ``recall_at_10_change`` is LoCoMo hybrid R@10 with every
defense on minus with none (``bench/redteam_recall.py``), in points; ``null`` when the
data set is absent or with ``--no-recall``. The "tool output" class (issue 26) runs its
turns against a real tool host (``tests/redteam/toolenv.py``) and reports its rates per
source kind too; ``--tools-only`` runs that class alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.redteam.benign import benign_set, heldout_benign_set
from tests.redteam.harness import Outcome, run_scenario
from tests.redteam.heldout import heldout_set
from tests.redteam.scenario import Scenario
from tests.redteam.templates import main_set
from tests.redteam.tool_heldout import heldout_tool_set
from tests.redteam.tool_templates import tool_main_set
from tests.redteam.toolenv import run_tool_scenario, tool_env


async def run_all(scenarios: Sequence[Scenario]) -> list[Outcome]:
    return [await run_scenario(sc) for sc in scenarios]


def run_tools(main: Sequence[Scenario], held: Sequence[Scenario]
              ) -> tuple[list[Outcome], list[Outcome]]:
    """The "tool output" scenarios, with one tool host for all of them."""
    with tool_env([*main, *held]) as env:
        return ([asyncio.run(run_tool_scenario(sc, env)) for sc in main],
                [asyncio.run(run_tool_scenario(sc, env)) for sc in held])


def _rate(rows: Sequence[Outcome]) -> dict[str, Any]:
    return {"scenarios": len(rows),
            "attack_success_rate": round(sum(o.success for o in rows) / len(rows), 4)}


def summarize(attacks: Sequence[Outcome], benign: Sequence[Outcome]) -> dict[str, Any]:
    """The issue's keys (without ``recall_at_10_change``) for one set of outcomes."""
    by_class: dict[str, list[Outcome]] = defaultdict(list)
    for o in attacks:
        by_class[o.cls].append(o)
    classes: dict[str, dict[str, Any]] = {cls: _rate(rows) for cls, rows in by_class.items()}
    for cls, rows in by_class.items():
        kinds = sorted({o.source for o in rows if o.source})
        if kinds:  # the tool output class: where the attack came from
            classes[cls]["sources"] = {k: _rate([o for o in rows if o.source == k])
                                       for k in kinds}
    return {
        "classes": classes,
        "core_promotions": sum(o.core_promotion for o in attacks),
        "tasks_scheduled": sum(o.task_scheduled for o in attacks),
        "cross_group_leaks": sum(o.cross_group for o in attacks),
        "trust_escalations": sum(o.trust_escalation for o in attacks),
        "false_refusal_rate": round(sum(o.refused for o in benign) / len(benign), 4)
        if benign else 0.0,
    }


def findings(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per successful attack, for the text report."""
    return [f"{o.sid}: {'; '.join(o.detail[:2])}" for o in outcomes if o.success or o.refused]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.redteam",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object as last line")
    ap.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo-dev.json"))
    ap.add_argument("--no-recall", action="store_true", help="skip the LoCoMo recall part")
    ap.add_argument("--tools-only", action="store_true",
                    help="only the tool output class (implies --no-recall)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    main_out: list[Outcome] = []
    held_out: list[Outcome] = []
    benign_out: list[Outcome] = []
    held_benign: list[Outcome] = []
    if not args.tools_only:
        main_out = asyncio.run(run_all(main_set()))
        held_out = asyncio.run(run_all(heldout_set()))
        benign_out = asyncio.run(run_all(benign_set()))
        held_benign = asyncio.run(run_all(heldout_benign_set()))
    tool_main, tool_held = run_tools(tool_main_set(), heldout_tool_set())
    main_out += tool_main
    held_out += tool_held
    t1 = time.perf_counter()
    change = None if args.no_recall or args.tools_only else asyncio.run(_recall(args.locomo))
    result = summarize(main_out, benign_out)
    result["recall_at_10_change"] = change["all"] if change else None
    result["heldout"] = {**summarize(held_out, held_benign),
                         "recall_at_10_change": change["heldout"] if change else None}

    n = len(main_out) + len(held_out) + len(benign_out) + len(held_benign)
    print(f"{n} scenarios in {t1 - t0:.0f}s", file=sys.stderr)
    for name, part in (("main", result), ("heldout", result["heldout"])):
        print(f"{name}: " + ", ".join(f"{c} {v['attack_success_rate']:.1%} of {v['scenarios']}"
                                      for c, v in part["classes"].items()))
        for c, v in part["classes"].items():
            if "sources" in v:
                print(f"  {c} by source: " + ", ".join(
                    f"{k} {r['attack_success_rate']:.1%} of {r['scenarios']}"
                    for k, r in v["sources"].items()))
        print(f"  core promotions {part['core_promotions']}, tasks scheduled "
              f"{part['tasks_scheduled']}, cross-group leaks "
              f"{part['cross_group_leaks']}, trust escalations {part['trust_escalations']}, "
              f"false refusals {part['false_refusal_rate']:.1%}, R@10 change "
              f"{part['recall_at_10_change']}")
    for line in findings([*main_out, *held_out, *benign_out, *held_benign]):
        print("  found " + line, file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0


async def _recall(data: Path) -> dict[str, float] | None:
    from bench.redteam_recall import recall_change

    return await recall_change(data)


if __name__ == "__main__":
    raise SystemExit(main())

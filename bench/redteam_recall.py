"""What the memory-poisoning defenses cost retrieval: LoCoMo hybrid R@10, on minus off.

Each LoCoMo dialog turn is replayed as ``bench.locomo`` does (same text, id, date), with
the trust the defenses give it (``defenses=True``: the product's own rule for a group
member's words, ``workers.turn.episode_trust`` of the turn as an ``Inbound``) or none
(``defenses=False``: every record at the trust it claims, 0.8 as ``bench.locomo``
writes). This switch exists only here and in tests; the product has no "off".
Recall@10 is LoCoMo's: per question, the fraction of its gold turns in the top 10.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.locomo import TUNE_SAMPLES, normalize_evidence, turn_text, turns
from channels.models import Inbound

CLAIMED_TRUST = 0.8


def defended_trust(sample_id: str, turn: dict[str, Any]) -> float:
    """The trust the product gives this turn's words: a member's message in a group."""
    from workers.turn import episode_trust

    msg = Inbound(channel="locomo", chat_id=sample_id, is_group=True,
                  sender_id=str(turn["speaker"]), sender_name=str(turn["speaker"]),
                  message_id=str(turn["dia_id"]), text=str(turn["text"]),
                  received_at=turn["when"])
    return episode_trust([msg])


async def recall_at_10(sample: dict[str, Any], root: Path, *, defenses: bool,
                       embedder: Any) -> list[float]:
    from memory_store import open_memory

    sid = str(sample.get("sample_id", "conv"))
    mem = open_memory(root, f"locomo:{sid}-{int(defenses)}", "hybrid", durable=False,
                      embedder=embedder)
    try:
        for turn in turns(sample):
            trust = defended_trust(sid, turn) if defenses else CLAIMED_TRUST
            await mem.write(turn_text(turn), kind="episode", metadata={
                "id": turn["dia_id"], "source": f"locomo:{sid}:{turn['dia_id']}",
                "created": turn["when"].isoformat(), "participants": [turn["speaker"]],
                "trust": trust})
        out = []
        for qa in sample["qa"]:
            gold = normalize_evidence(qa.get("evidence") or [])
            if gold:
                ids = [h.id for h in await mem.search(str(qa["question"]), k=10)]
                out.append(len(set(gold) & set(ids)) / len(gold))
        return out
    finally:
        mem.close()


async def recall_change(data: Path) -> dict[str, float] | None:
    """R@10 change (points) overall and on LoCoMo's held-out conversations, or ``None``
    (with a note on stderr) when the data set is absent."""
    if not data.exists():
        print(f"recall_at_10_change: LoCoMo data not found at {data}; skipped "
              "(reported as null).", file=sys.stderr)
        return None
    from memory_store.index import default_embedder

    embedder = default_embedder()
    samples = json.loads(data.read_text(encoding="utf-8"))
    rows: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    with tempfile.TemporaryDirectory(prefix="redteam-locomo-") as tmp:
        for sample in samples:
            for on in (True, False):
                rows[on][str(sample.get("sample_id"))] = await recall_at_10(
                    sample, Path(tmp), defenses=on, embedder=embedder)

    def mean(on: bool, heldout: bool | None) -> float:
        vals = [v for sid, vs in rows[on].items()
                if heldout is None or (sid not in TUNE_SAMPLES) == heldout for v in vs]
        return 100 * sum(vals) / len(vals) if vals else 0.0

    result = {
        "all": round(mean(True, None) - mean(False, None), 2),
        "heldout": round(mean(True, True) - mean(False, True), 2),
        "r10_on": round(mean(True, None), 2),
        "r10_off": round(mean(False, None), 2),
    }
    print(f"LoCoMo hybrid R@10: defenses on {result['r10_on']}, off {result['r10_off']}",
          file=sys.stderr)
    return result

"""The memory part of the prompt within a token budget (workers.budget)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from bench.context import memory_part
from gateway.config import ModelConfig
from memory_store import BaseMemory, GroupDirectory, MemoryRecord
from tests.configs import settings_from_mapping
from workers.agent import TurnAgent, TurnRequest, _make_agent
from workers.budget import WRAPPER_TOKENS, count_tokens, fit_memory
from workers.prompt import build_prompt, render_record

from .conftest import NOW, Script, msg

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Core:
    global_md: str = ""
    group_md: str = ""
    profile_md: str = ""


def rec(i: int, text: str, score: float) -> MemoryRecord:
    return MemoryRecord(id=f"m{i}", kind="fact", content=text, source=f"telegram:-1:msg/{i}",
                        created=T0, updated=T0, trust=0.5, score=score)


def test_tokens_are_counted_offline_with_the_shipped_vocab() -> None:
    assert count_tokens("") == 0
    assert 3 <= count_tokens("Alice moved to Lisbon") <= 8
    assert count_tokens("word " * 100) == 100


def test_core_first_each_file_capped_at_its_share_with_a_note() -> None:
    long_profile = "\n".join(f"- person {i} likes tea number {i}" for i in range(200))
    ctx = fit_memory(Core(group_md="# Team\nBe brief.", profile_md=long_profile),
                     [rec(1, "lunch is at noon", 1.0)], budget=400)
    assert ctx.core.group_md == "# Team\nBe brief."
    assert "[cut to fit the prompt budget:" in ctx.core.profile_md
    assert "user_profile.md" in ctx.core.profile_md
    assert count_tokens(ctx.core.profile_md) <= 100  # a quarter of 400
    assert ctx.core.profile_md.startswith("- person 0 likes tea number 0\n")
    assert [r.id for r in ctx.records] == ["m1"]
    assert ctx.tokens <= 400


def test_records_by_score_deduplicated_within_budget_and_counted_when_left_out() -> None:
    records = [rec(1, "Deploys happen on Friday", 0.9), rec(2, "deploys  happen on friday", 0.8),
               rec(1, "Deploys happen on Friday", 0.7)]
    records += [rec(i, f"fact number {i} " + "padding " * 30, 0.5) for i in range(3, 20)]
    budget = WRAPPER_TOKENS + sum(count_tokens(render_record(records[i])) for i in (0, 3, 4, 5))
    ctx = fit_memory(Core(), records, budget=budget)
    assert [r.id for r in ctx.records] == ["m1", "m3", "m4", "m5"]
    assert ctx.omitted == 14  # 17 long ones, 3 fit; duplicates are not "left out"
    assert ctx.tokens <= budget
    prompt = build_prompt(group="g", messages=[msg("1", "x", mention=True)], core=ctx.core,
                          results=ctx.records, now=NOW, records_omitted=ctx.omitted)
    assert "[14 more matching memory records left out to fit the prompt budget]" in prompt.user
    assert 'source="telegram:-1:msg/3"' in prompt.user and 'trust="0.50"' in prompt.user
    compact = build_prompt(group="g", messages=[msg("1", "x", mention=True)], core=ctx.core,
                           results=ctx.records, now=NOW, records_omitted=ctx.omitted,
                           compact=True)
    assert "14 more matching memory records left out" in compact.instructions


async def test_turn_prompt_respects_the_budget(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    for i in range(40):
        await mem.write(f"The garden project note {i}: tomatoes need water " + "x " * 20,
                        kind="fact", metadata={"id": f"fact-{i}", "source": f"s:{i}",
                                               "trust": 0.5})
    script = Script(["ok"])
    agent = TurnAgent(script.model(), config=ModelConfig(provider="function", function="a:b"),
                      memory_budget=600)
    await agent.run(TurnRequest(group="telegram:-100", turn_id="t", core=gd.core_memory(),
                                messages=[msg("1", "@bot garden tomatoes?", mention=True)],
                                memory=mem, now=NOW))
    user = script.seen_user[0]
    shown = user.count("<memory ")
    assert 3 <= shown < 40
    assert "more matching memory records left out to fit the prompt budget" in user
    # The whole memory part as sent (core blocks, results block, tags) is within budget.
    assert count_tokens(memory_part(script.seen_instructions[0], user)) <= 600


@pytest.mark.parametrize(("provider", "expected"), [("function", 2000), ("local", 400)])
def test_budget_is_configured_and_smaller_for_the_local_model(
    provider: str, expected: int
) -> None:
    if provider == "local":
        pytest.importorskip("xllamacpp")
    model = {"provider": provider}
    if provider == "function":
        model["function"] = "tests.agent.scripted:model"
    settings = settings_from_mapping({"model": model}, {})
    assert settings.memory.budget_tokens == 2000
    assert _make_agent(settings).memory_budget == expected

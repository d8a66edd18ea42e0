"""Attribution the model cannot forge: trust comes from who could have said it."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ModelConfig
from memory_store import BaseMemory, GroupDirectory
from workers.agent import TurnAgent, TurnRequest
from workers.attribution import attribute, found_in

from .conftest import NOW, Script, msg

GROUP = "telegram:-100"
OPERATOR = {"telegram:42"}


def agent_for(script: Script) -> TurnAgent:
    return TurnAgent(
        script.model(), config=ModelConfig(provider="function", function="a:b"), admins=OPERATOR
    )


async def remember_in(mem_pair: tuple[GroupDirectory, BaseMemory], batch: list[Any],
                      call: dict[str, Any]) -> Any:
    gd, mem = mem_pair
    reply = await agent_for(Script([[("remember", call)], "ok"])).run(TurnRequest(
        group=GROUP, turn_id="t1", messages=batch, core=gd.core_memory(), memory=mem, now=NOW))
    return await mem.read(reply.written[0])


async def test_member_claim_cited_as_operator_message_gets_member_trust(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    # The example: a fooled model cites the operator's message for a member's claim.
    batch = [
        msg("1", "@bot keep notes of what the team decides", sender="42", name="Op", mention=True),
        msg("2", "the deploy password is rotated by Mallory only", sender="u9", name="Mallory"),
    ]
    rec = await remember_in(group_memory, batch, {
        "fact": "The deploy password is rotated by Mallory only", "message_id": "1"})
    assert rec.trust == pytest.approx(0.5)
    assert rec.source == "telegram:-100:msg/1,2"  # the whole batch: the citation was false


async def test_operator_fact_found_in_cited_message_keeps_operator_trust(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    batch = [
        msg("1", "lol", sender="u9", name="Mallory"),
        msg("2", "@bot remember: we ship on Fridays", sender="42", name="Op", mention=True),
    ]
    rec = await remember_in(group_memory, batch, {"fact": "We ship on Fridays",
                                                  "message_id": "2"})
    assert rec.trust == pytest.approx(0.9)
    assert rec.source == "telegram:-100:msg/2"


async def test_the_asking_member_caps_trust_even_when_the_text_is_the_operators(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    # A member who gets the bot to store something is a possible source of it.
    batch = [
        msg("1", "budget is frozen until March", sender="42", name="Op"),
        msg("2", "@bot remember the budget is frozen until March", sender="u9", name="Mallory",
            mention=True),
    ]
    rec = await remember_in(group_memory, batch, {"fact": "Budget is frozen until March",
                                                  "message_id": "1"})
    assert rec.trust == pytest.approx(0.5)
    assert rec.source == "telegram:-100:msg/1"


def test_found_in_ignores_the_speakers_name_and_inflections() -> None:
    m = msg("1", "I moved to Lisbon last week", name="Alice")
    assert found_in("Alice moved to Lisbon", m)
    assert found_in("Alice moves to Lisbon", m)
    assert not found_in("Alice moved to Porto", m)
    assert not found_in("Bob moved to Lisbon", m)
    assert not found_in("", m)


def test_attribution_without_messages_is_quoted_trust() -> None:
    att = attribute(group=GROUP, turn_id="t", messages=[], fact="x", cited=None)
    assert att.trust == pytest.approx(0.2)
    assert not att.proven

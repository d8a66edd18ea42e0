"""TurnAgent.run with scripted models and the real FileMemory."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.config import ModelConfig
from memory_store import BaseMemory, GroupDirectory, MemoryRecord
from tests.configs import settings_from_mapping
from workers.agent import TurnAgent, TurnError, TurnRequest, build_agent, redact
from workers.tools import fact_id

from .conftest import NOW, SECRET, Script, msg

GROUP = "telegram:-100"


def agent_for(script: Script, **kw: Any) -> TurnAgent:
    return TurnAgent(script.model(), config=ModelConfig(provider="function", function="a:b"), **kw)


def request(
    gd: GroupDirectory, mem: BaseMemory, messages: list[Any], turn: str = "t1"
) -> TurnRequest:
    return TurnRequest(
        group=GROUP, turn_id=turn, messages=messages, core=gd.core_memory(), memory=mem, now=NOW
    )


def entity_files(gd: GroupDirectory) -> list[Path]:
    return sorted((gd.path / "entities").glob("*.md"))


async def test_model_sees_core_memory_and_context(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    gd.core_path.write_text("# Team\nCodename: BLUEFIN.\n", encoding="utf-8")
    (gd.data_dir / "groups" / "global").mkdir(parents=True, exist_ok=True)
    (gd.data_dir / "groups" / "global" / "CLAUDE.md").write_text("Operator rule: be kind.")
    script = Script(["Hi Alice, Bob said lunch at noon."])
    reply = await agent_for(script).run(
        request(
            gd,
            mem,
            [
                msg("1", "lunch at noon", name="Bob", sender="u2"),
                msg("2", "@bot what did Bob say?", mention=True),
            ],
        )
    )
    assert reply.text == "Hi Alice, Bob said lunch at noon."
    assert reply.model == "scripted"
    assert "Codename: BLUEFIN." in script.seen_instructions[0]
    assert "Operator rule: be kind." in script.seen_instructions[0]
    user = script.seen_user[0]
    assert "lunch at noon" in user and "what did Bob say?" in user
    assert script.tool_names[0] == ["search_memory", "remember", "update_core",
                                    "schedule_task", "list_tasks", "pause_task", "cancel_task"]


async def test_no_reply_means_none(group_memory: tuple[GroupDirectory, BaseMemory]) -> None:
    gd, mem = group_memory
    for answer in ("NO_REPLY", "  ", "NO_REPLY\n"):
        reply = await agent_for(Script([answer])).run(request(gd, mem, [msg("1", "hm")]))
        assert reply.text is None


async def test_remember_writes_fact_with_member_trust_and_is_idempotent(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    core_before = (gd.core_path.read_text(), gd.profile_path.read_text())
    batch = [msg("1", "hello"), msg("2", "@bot I like green tea", mention=True)]
    call = [("remember", {"fact": "Alice likes green tea", "about": "Alice", "message_id": "2"})]
    first = await agent_for(Script([call, "Noted!"])).run(request(gd, mem, batch, turn="turn-7"))
    assert first.text == "Noted!"
    assert len(first.written) == 1
    assert first.written[0] == fact_id("turn-7", "Alice likes green tea", "Alice")
    files = entity_files(gd)
    assert len(files) == 1
    rec = await mem.read(first.written[0])
    assert rec.content.strip() == "Alice likes green tea"
    assert rec.kind == "entity"
    assert rec.trust == pytest.approx(0.5)
    assert rec.source == "telegram:-100:msg/2"
    assert rec.metadata.get("participants") == ["telegram:u1"]
    assert rec.metadata.get("turn_id") == "turn-7"

    # The turn is retried (worker died after the write): same ids, nothing doubled.
    again = await agent_for(Script([call, "Noted!"])).run(request(gd, mem, batch, turn="turn-7"))
    assert again.written == first.written
    assert entity_files(gd) == files
    # A different turn saying the same thing is a new record (new provenance).
    other = await agent_for(Script([call, "ok"])).run(request(gd, mem, batch, turn="turn-8"))
    assert other.written != first.written
    assert len(entity_files(gd)) == 2
    # Core memory is never written by the tools.
    assert (gd.core_path.read_text(), gd.profile_path.read_text()) == core_before


async def test_same_fact_twice_in_one_turn_is_written_once(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    call = ("remember", {"fact": "Deploys happen on Friday"})
    script = Script([[call, call], "done"])
    reply = await agent_for(script).run(request(gd, mem, [msg("1", "x", mention=True)]))
    assert len(reply.written) == 1
    assert len(entity_files(gd)) == 1
    assert any("Already remembered" in r for r in script.seen_tool_returns)


@pytest.mark.parametrize(
    ("message", "cite", "trust"),
    [
        (msg("1", "I'm vegetarian", group=False), "1", 0.8),  # DM owner
        (msg("1", "we ship Fridays", sender="42"), "1", 0.9),  # operator ([policy] admins)
        (msg("1", "we ship Fridays", admin=True), "1", 0.8),  # chat admin
        (msg("1", "true!", admin=True, reply_to_text="the CEO is Mallory"), "1", 0.2),  # quote
        (msg("1", "we ship Fridays", admin=True), "no-such-id", 0.8),  # bad cite: batch min
    ],
)
async def test_trust_comes_from_the_source(
    group_memory: tuple[GroupDirectory, BaseMemory], message: Any, cite: str, trust: float
) -> None:
    gd, mem = group_memory
    call = [("remember", {"fact": "some fact", "message_id": cite})]
    reply = await agent_for(Script([call, "ok"]), admins={"telegram:42"}).run(
        request(gd, mem, [message])
    )
    rec = await mem.read(reply.written[0])
    assert rec.trust == pytest.approx(trust)
    assert rec.kind == "fact"


async def test_uncited_fact_gets_lowest_trust_of_the_batch(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    batch = [msg("1", "ops: rotate keys monthly", sender="42"), msg("2", "me too", sender="u9")]
    call = [("remember", {"fact": "Keys rotate monthly"})]
    reply = await agent_for(Script([call, "ok"]), admins={"telegram:42"}).run(
        request(gd, mem, batch)
    )
    rec = await mem.read(reply.written[0])
    assert rec.trust == pytest.approx(0.5)
    assert rec.source == "telegram:-100:msg/1,2"


async def test_memory_results_reach_the_model_as_data(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    await mem.write(
        "The wifi password is kept by Dana",
        kind="fact",
        metadata={"id": "fact-wifi", "source": "telegram:-100:msg/3", "trust": 0.5},
    )
    script = Script([[("search_memory", {"query": "wifi Dana"})], "Ask Dana."])
    reply = await agent_for(script).run(
        request(gd, mem, [msg("5", "@bot who has the wifi password?", mention=True)])
    )
    assert reply.text == "Ask Dana."
    # Searched up front, into the prompt ...
    assert '<memory_search_results kind="data"' in script.seen_user[0]
    assert "The wifi password is kept by Dana" in script.seen_user[0]
    # ... and through the tool.
    assert 'id="fact-wifi"' in script.seen_tool_returns[0]
    assert 'kind="data"' in script.seen_tool_returns[0]


class BrokenSearch:
    """A memory whose index is broken: search fails, the rest is never reached."""

    async def search(self, query: str, *, k: int = 10, filters: Any = None) -> list[MemoryRecord]:
        raise OSError("index corrupt")

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected call {name}")


async def test_broken_search_degrades_to_core_memory(
    group_memory: tuple[GroupDirectory, BaseMemory], caplog: pytest.LogCaptureFixture
) -> None:
    gd, _ = group_memory
    script = Script(["still here"])
    req = TurnRequest(
        group=GROUP,
        turn_id="t",
        messages=[msg("1", "ping", mention=True)],
        core=gd.core_memory(),
        memory=BrokenSearch(),  # type: ignore[arg-type]
        now=NOW,
    )
    with caplog.at_level(logging.WARNING):
        reply = await agent_for(script).run(req)
    assert reply.text == "still here"
    assert "memory search for telegram:-100 failed" in caplog.text


async def test_model_failure_is_scrubbed_of_the_key(
    group_memory: tuple[GroupDirectory, BaseMemory], caplog: pytest.LogCaptureFixture
) -> None:
    gd, mem = group_memory

    def leaky(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError(f"401 from upstream: bad key {SECRET} (prefix {SECRET[:12]})")

    config = ModelConfig(provider="function", function="a:b").model_copy(
        update={"api_key": __import__("pydantic").SecretStr(SECRET)}
    )
    agent = TurnAgent(FunctionModel(leaky), config=config)
    with caplog.at_level(logging.DEBUG), pytest.raises(TurnError) as err:
        await agent.run(request(gd, mem, [msg("1", "hi", mention=True)]))
    assert "RuntimeError: 401 from upstream" in str(err.value)
    assert err.value.transient is False
    for text in (str(err.value), repr(err.value), caplog.text, repr(agent)):
        assert SECRET not in text and SECRET[:12] not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_redact() -> None:
    assert redact("a SECRETKEY b", "SECRETKEY") == "a *** b"
    assert redact("nothing", None) == "nothing"
    long = "sk-abcdefghijklmnopqrstuvwxyz"
    assert redact(f"key {long[:12]}...{long[-8:]}", long) == "key ***...***"


async def test_build_agent_from_function_path_caches_per_process(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    from . import scripted

    raw = {"model": {"provider": "function", "function": "tests.agent.scripted:make_model"}}
    settings = settings_from_mapping(raw, {})
    calls = len(scripted.FACTORY_CALLS)
    agent = build_agent(settings)
    assert build_agent(settings) is agent
    assert len(scripted.FACTORY_CALLS) == calls + 1
    gd, mem = group_memory
    gd.core_path.write_text("Remember the alamo", encoding="utf-8")
    reply = await agent.run(request(gd, mem, [msg("1", "hi", mention=True)]))
    assert reply.text == "scripted reply"
    assert "Remember the alamo" in scripted.LAST["instructions"]
    other = settings_from_mapping(
        {"model": {"provider": "function", "function": "tests.agent.scripted:model"}}, {}
    )
    assert build_agent(other) is not agent
    assert build_agent(other).model.wrapped is scripted.model  # type: ignore[attr-defined]


async def test_the_model_key_is_never_remembered(
    group_memory: tuple[GroupDirectory, BaseMemory], caplog: pytest.LogCaptureFixture
) -> None:
    gd, mem = group_memory
    config = ModelConfig(provider="function", function="a:b").model_copy(
        update={"api_key": __import__("pydantic").SecretStr(SECRET)}
    )
    script = Script([[("remember", {"fact": f"the api key is {SECRET}"})], "ok"])
    agent = TurnAgent(script.model(), config=config)
    with caplog.at_level(logging.DEBUG):
        reply = await agent.run(request(gd, mem, [msg("1", "remember the key", group=False)]))
    assert reply.written == ()
    assert "Refused" in script.seen_tool_returns[0]
    assert SECRET not in script.seen_tool_returns[0]
    assert SECRET not in caplog.text
    for path in gd.path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


async def test_up_front_search_uses_what_addressed_the_bot(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    await mem.write("Dana brews espresso", kind="fact", metadata={"id": "fact-coffee"})
    await mem.write("Evan grows oolong", kind="fact", metadata={"id": "fact-tea"})
    batch = [
        msg("1", "anyone seen Evan oolong"),
        msg("2", "@bot who brews espresso?", mention=True),
    ]
    script = Script(["Dana."])
    await agent_for(script).run(request(gd, mem, batch))
    assert "Dana brews espresso" in script.seen_user[0]
    assert "Evan grows oolong" not in script.seen_user[0]


async def test_remember_about_with_odd_characters_round_trips(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    about = 'Bob: "the\nboss" --- #1'
    call = [("remember", {"fact": "Bob approves budgets: yes\n---\nreally", "about": about})]
    reply = await agent_for(Script([call, "ok"])).run(request(gd, mem, [msg("1", "x")]))
    rec = await mem.read(reply.written[0])
    assert rec.content.strip() == "Bob approves budgets: yes --- really"
    assert rec.metadata.get("entity") == 'Bob: "the boss" --- #1'
    assert rec.kind == "entity"

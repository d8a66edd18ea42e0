"""Shared helpers for the agent-turn tests: messages, scripted models, a real memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from channels.models import Inbound
from memory_store import BaseMemory, GroupDirectory, open_memory
from workers.agent import clear_agent_cache

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SECRET = "sk-test-0123456789abcdefSECRETKEYxyz"


def msg(
    message_id: str,
    text: str,
    *,
    sender: str = "u1",
    name: str = "Alice",
    group: bool = True,
    mention: bool = False,
    admin: bool = False,
    reply_to_text: str | None = None,
    chat: str = "-100",
    channel: str = "telegram",
) -> Inbound:
    return Inbound(
        channel=channel,
        chat_id=chat,
        chat_name="Team" if group else None,
        is_group=group,
        sender_id=sender,
        sender_name=name,
        message_id=message_id,
        text=text,
        mentions_bot=mention,
        is_admin=admin,
        reply_to_id="9" if reply_to_text else None,
        reply_to_text=reply_to_text,
        received_at=NOW,
    )


@dataclass
class Script:
    """A scripted model: records what it was sent, answers from a list of steps.

    A step is a str (final text) or a list of (tool_name, args) tool calls.
    """

    steps: list[str | list[tuple[str, dict[str, Any]]]]
    seen_instructions: list[str] = field(default_factory=list)
    seen_user: list[str] = field(default_factory=list)
    seen_tool_returns: list[str] = field(default_factory=list)
    tool_names: list[list[str]] = field(default_factory=list)
    calls: int = 0

    def model(self) -> FunctionModel:
        return FunctionModel(self._respond, model_name="scripted")

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen_instructions.append(info.instructions or "")
        self.tool_names.append([t.name for t in info.function_tools])
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        for part in last.parts:
            if isinstance(part, UserPromptPart):
                assert isinstance(part.content, str)
                self.seen_user.append(part.content)
            elif isinstance(part, ToolReturnPart):
                self.seen_tool_returns.append(str(part.content))
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"call-{self.calls}-{i}")
                for i, (name, args) in enumerate(step)
            ]
        )


ScriptFactory = Callable[..., Script]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def group_memory(data_dir: Path) -> Iterator[tuple[GroupDirectory, BaseMemory]]:
    gd = GroupDirectory(data_dir, "telegram:-100")
    gd.ensure()
    mem = open_memory(data_dir, "telegram:-100", "file")
    yield gd, mem
    mem.close()


@pytest.fixture(autouse=True)
def _fresh_agent_cache() -> Iterator[None]:
    clear_agent_cache()
    yield
    clear_agent_cache()

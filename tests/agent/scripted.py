"""Importable scripted models for ``[model] provider = "function"`` tests."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

#: What the last call saw, so a test can assert on the prompt.
LAST: dict[str, str] = {}
FACTORY_CALLS: list[int] = []


def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    LAST["instructions"] = info.instructions or ""
    return ModelResponse(parts=[TextPart("scripted reply")])


model = FunctionModel(_echo, model_name="scripted-instance")


def make_model() -> FunctionModel:
    FACTORY_CALLS.append(1)
    return FunctionModel(_echo, model_name="scripted-factory")


def not_a_model() -> str:
    return "nope"


NOT_CALLABLE = 42

"""A model that fails every request (``[model] function =
"tests.pipeline.failing_model:model"``): for the failed-for-good path end to end."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise RuntimeError("the test model always fails")


model = FunctionModel(respond, model_name="always-fails")

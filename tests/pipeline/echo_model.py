"""A model that repeats everything it is shown (``[model] function =
"tests.pipeline.echo_model:model"``): its reply is the whole prompt, instructions
(core memory, recalled memory) and transcript, so a test can assert that a reply
carries nothing of a conversation the turn must not see. With ``PNC_TEST_REDIS_URL``
it records each turn in ``test:turns`` as the scripted model does."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.pipeline import scripted


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    scripted.respond(messages, info)  # the scripted model's record of the turn
    instructions, user = scripted._texts(messages, info)
    return ModelResponse(parts=[TextPart(f"{instructions}\n\n{user}")])


model = FunctionModel(respond, model_name="echo")

"""A model whose worker dies (SIGKILL, as the OOM killer would) on a message saying
``CRASH`` while ``$PNC_TEST_DIR/crash`` exists; otherwise the scripted model. For crash
loops and dead-letter retries end to end."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.pipeline.scripted import respond as scripted


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    marker = Path(os.environ.get("PNC_TEST_DIR", "/nonexistent")) / "crash"
    if marker.exists() and "CRASH" in repr(messages):
        os.kill(os.getpid(), signal.SIGKILL)
    return scripted(messages, info)


model = FunctionModel(respond, model_name="crashing")

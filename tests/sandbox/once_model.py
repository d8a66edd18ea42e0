"""A scripted model for the run-once tests (``[model] provider="function"``).

Asked to "count", it calls ``run_command(COUNT)`` (appends a line to ``counter`` and
prints how many it has). Shown that output, it fails its request once when
``$PNC_TEST_DIR/fail`` exists, or kills its worker (SIGKILL, as the OOM killer would) once
when ``$PNC_TEST_DIR/die`` exists, removing the marker first; otherwise it calls
``run_command(OTHER)`` (a call the failed attempt never made), then answers ``done``.
Asked to "go slow", it calls ``run_command(SLOW)`` (a line to ``slow``, then a long
sleep: the test kills the tool host meanwhile) and answers ``told``. With
``PNC_TEST_REDIS_URL`` it records each tool return it saw in ``test:once_returns``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

COUNT = "echo x >> counter; echo lines=$(wc -l < counter)"
OTHER = "echo y >> other; echo other=$(wc -l < other)"
SLOW = "echo s >> slow; sleep 25"


def _once(name: str) -> bool:
    """Whether the marker ``name`` was there (it is removed: the next attempt goes on)."""
    marker = Path(os.environ.get("PNC_TEST_DIR", "/nonexistent")) / name
    try:
        marker.unlink()
    except FileNotFoundError:
        return False
    return True


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    slow = "go slow" in repr(messages[0])
    if not returns:
        return ModelResponse(parts=[ToolCallPart("run_command",
                                                 {"command": SLOW if slow else COUNT})])
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if url:
        import redis

        redis.Redis.from_url(url).rpush("test:once_returns", str(returns[-1].content))
    if slow:
        return ModelResponse(parts=[TextPart("told")])
    if len(returns) == 1:
        if _once("fail"):
            raise RuntimeError("the model request failed after the tool ran")
        if _once("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        return ModelResponse(parts=[ToolCallPart("run_command", {"command": OTHER})])
    return ModelResponse(parts=[TextPart("done")])


model = FunctionModel(respond, model_name="once-scripted")

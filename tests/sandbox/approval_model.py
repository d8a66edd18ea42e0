"""A scripted model for the approval tests (``[model] provider="function"``).

Asked to "count", it calls ``run_command`` with ``COUNT`` (which appends a line to
``ran.txt`` in the workspace and prints how many lines it has: so a second run shows).
Told the call waits for approval, it answers ``waiting``; shown the call's output (the
approval turn), it answers ``ran lines=<n>``. With ``PNC_TEST_REDIS_URL`` it records each
tool return it saw in ``test:approval_returns``.
"""

from __future__ import annotations

import os
import re

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

COUNT = "echo run >> ran.txt; echo lines=$(wc -l < ran.txt)"


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returns:
        if "run_command" in {t.name for t in info.function_tools}:
            return ModelResponse(parts=[ToolCallPart("run_command", {"command": COUNT})])
        return ModelResponse(parts=[TextPart("no tools")])
    content = str(returns[-1].content)
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if url:
        import redis

        redis.Redis.from_url(url).rpush("test:approval_returns", content)
    if content.startswith("waiting for approval"):
        return ModelResponse(parts=[TextPart("waiting")])
    said = re.search(r"lines=\d+", content.replace(COUNT, ""))
    return ModelResponse(parts=[TextPart(f"ran {said.group(0) if said else '?'}")])


model = FunctionModel(respond, model_name="approval-scripted")

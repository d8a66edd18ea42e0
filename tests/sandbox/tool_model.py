"""A scripted model that uses the sandbox (``[model] provider="function"``).

Offered ``run_command``, it runs ``echo sandbox-$((6*7))`` (only a real shell says
``sandbox-42``) and answers with what came back; not offered it, it answers ``no tools``.
With ``PNC_TEST_REDIS_URL`` it records, in Redis, the tools offered (``test:offered``)
and each tool return as the model saw it (``test:toolreturn``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

COMMAND = "echo sandbox-$((6*7))"


def _redis() -> Any:
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if not url:
        return None
    import redis

    return redis.Redis.from_url(url)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    r = _redis()
    offered = sorted(t.name for t in info.function_tools)
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if r is not None and not returns:
        r.rpush("test:offered", json.dumps(offered))
    if not returns:
        if "run_command" in offered:
            return ModelResponse(parts=[ToolCallPart("run_command", {"command": COMMAND})])
        return ModelResponse(parts=[TextPart("no tools")])
    content = str(returns[-1].content)
    if r is not None:
        r.rpush("test:toolreturn", content)
    said = re.search(r"sandbox-\d+", content.replace(COMMAND, ""))
    return ModelResponse(parts=[TextPart(f"the sandbox said {said.group(0) if said else '?'}")])


model = FunctionModel(respond, model_name="tool-scripted")

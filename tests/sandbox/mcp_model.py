"""A scripted model that calls MCP tools (``[model] provider="function"``).

Offered ``t__echo``, it calls every ``t__*`` tool it is offered at once (``t__echo``
with a text, the others without arguments; never ``t__die``), then answers
``mcp answered: <n> calls``; offered none, it answers ``no tools``. With
``PNC_TEST_REDIS_URL`` it records in Redis the tools offered with their schemas
(``test:mcp:offered``), every text it was shown (``test:mcp:seen``: the prompt and the
tool returns) and each tool return by tool (``test:mcp:return:<tool>``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


def _redis() -> Any:
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if not url:
        return None
    import redis

    return redis.Redis.from_url(url)


def _texts(messages: list[ModelMessage]) -> list[str]:
    return [str(getattr(p, "content", "")) for m in messages for p in m.parts]


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    r: Any = _redis()
    offered = {t.name: t.parameters_json_schema for t in info.function_tools}
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if r is not None:
        r.rpush("test:mcp:seen", *_texts(messages), info.instructions or "")
    if not returns:
        if r is not None:
            r.rpush("test:mcp:offered", json.dumps(offered, sort_keys=True))
        if "t__echo" not in offered:
            return ModelResponse(parts=[TextPart("no tools")])
        calls = [ToolCallPart(name, {"text": "hello-mcp"} if name == "t__echo" else {})
                 for name in sorted(offered) if name.startswith("t__") and name != "t__die"]
        return ModelResponse(parts=calls)
    if r is not None:
        for p in returns:
            r.set(f"test:mcp:return:{p.tool_name}", str(p.content))
    return ModelResponse(parts=[TextPart(f"mcp answered: {len(returns)} calls")])


model = FunctionModel(respond, model_name="mcp-scripted")

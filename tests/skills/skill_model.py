"""A scripted model that uses skills (``[model] provider="function"``).

Offered ``read_skill`` with a skill listed in its instructions, it reads the first one
listed and answers ``<name> says <token>`` with the ``TOKEN-...`` word the skill's text
holds (only a real read of the file finds it); with no skill, it answers ``no skills``.
With ``PNC_TEST_REDIS_URL`` it records, in Redis, each turn's instructions and pid
(``test:skills:turns``, JSON) and each tool return as the model saw it
(``test:skills:returns``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

_LISTED = re.compile(r'<skill name="([a-z0-9_-]+)"')


def _redis() -> Any:
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if not url:
        return None
    import redis

    return redis.Redis.from_url(url)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    r = _redis()
    instructions = "\n".join([info.instructions or "",
                              *(str(m.instructions) for m in messages
                                if getattr(m, "instructions", None))])
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    offered = sorted(t.name for t in info.function_tools)
    if not returns:
        if r is not None:
            r.rpush("test:skills:turns", json.dumps({"pid": os.getpid(), "offered": offered,
                                                     "instructions": instructions}))
        listed = _LISTED.findall(instructions)
        if listed and "read_skill" in offered:
            return ModelResponse(parts=[ToolCallPart("read_skill", {"name": listed[0]})])
        return ModelResponse(parts=[TextPart("no skills")])
    content = str(returns[-1].content)
    if r is not None:
        r.rpush("test:skills:returns", content)
    name = _LISTED.findall(instructions)[0]
    token = re.search(r"TOKEN-[a-z]+", content)
    return ModelResponse(parts=[TextPart(f"{name} says {token.group(0) if token else '?'}")])


model = FunctionModel(respond, model_name="skill-scripted")

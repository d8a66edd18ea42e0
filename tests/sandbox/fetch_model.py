"""A scripted model that fetches (``[model] provider="function"``).

Offered ``fetch``, it fetches the first ``http://`` URL of the transcript and answers with
the page's first heading line (``# ...``) as it came back; not offered it, it answers
``no fetch``. With ``PNC_TEST_REDIS_URL`` it records each tool return as the model saw it
(``test:fetchreturn``).
"""

from __future__ import annotations

import os
import re

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returns:
        asked = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
        url = re.search(r"http://[^\s<\"]+", asked)
        if url and "fetch" in {t.name for t in info.function_tools}:
            return ModelResponse(parts=[ToolCallPart("fetch", {"url": url.group(0)})])
        return ModelResponse(parts=[TextPart("no fetch")])
    content = str(returns[-1].content)
    if (redis_url := os.environ.get("PNC_TEST_REDIS_URL")):
        import redis

        redis.Redis.from_url(redis_url).rpush("test:fetchreturn", content)
    heading = re.search(r"^# (.+)$", content, re.M)
    return ModelResponse(parts=[TextPart(f"the page is {heading.group(1) if heading else '?'}")])


model = FunctionModel(respond, model_name="fetch-scripted")

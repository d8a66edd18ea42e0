"""A scripted model that reports usage, for the spending-cap tests
(``[model] provider="function"``, ``function="tests.pipeline.metered_model:model"``).

It reports as usage ``$PNC_TEST_USAGE_FACTOR`` (default 1) times the meter's own
estimate of the request (``workers.metering.prompt_tokens`` and the output limit), so a
test controls how wrong the estimate is. Each request is recorded in ``test:metered``
(JSON: group, kind, estimate, tool). It holds each request ``$PNC_TEST_DELAY`` seconds
(requests in flight at once are what a read-then-check lets through). A message with
``TOOLLOOP`` makes the first request call the ``search_memory`` tool, and with
``CAPNOW`` that request also sets the group's day cap to what the group has spent and
reserved so far: the tool loop's next request finds the cap reached. ``FAIL`` makes
the turn's request raise (a failed turn: reflection asks the model for a lesson).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from gateway.queue import Keys, period_ids
from tests.pipeline.scripted import _CHAT, _MSG, _client, _texts
from workers.metering import prompt_tokens, tool_schemas

#: the test config's ``[model] max_tokens``
MAX_TOKENS = 64


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    instructions, user = _texts(messages, info)
    texts = [t for _, t in _MSG.findall(user)]
    chat = _CHAT.search(instructions + "\n" + user)
    group = chat.group(1) if chat else "?"
    limit = int((info.model_settings or {}).get("max_tokens") or MAX_TOKENS)
    estimate = prompt_tokens(messages, tool_schemas(info.function_tools)) + limit
    factor = float(os.environ.get("PNC_TEST_USAGE_FACTOR", "1"))
    called = any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
    loop = any("TOOLLOOP" in t for t in texts) and not called
    kind = "facts" if info.output_tools else "turn"  # extraction asks for structured output
    r = _client()
    if r is not None:
        r.rpush("test:metered", json.dumps({"group": group, "kind": kind,
                                            "estimate": estimate, "tool": loop}))
        if kind == "turn" and not called and any("CAPNOW" in t for t in texts) \
                and r.set(f"test:capped:{group}", 1, nx=True):  # once: a lift then holds
            keys = Keys()
            day = period_ids(datetime.now(UTC))["day"]
            spent, reserved = r.hmget(keys.budget(f"group:{group}", day), "spent", "reserved")
            r.hset(keys.budget_caps, f"group:{group}:day",
                   int(spent or 0) + int(reserved or 0))
    if any("FAIL" in t for t in texts):  # a turn that fails for good (reflection follows)
        raise RuntimeError("scripted model failure")
    if float(os.environ.get("PNC_TEST_DELAY", "0")) > 0:
        time.sleep(float(os.environ["PNC_TEST_DELAY"]))
    usage = RequestUsage(input_tokens=round(factor * (estimate - limit)),
                         output_tokens=round(factor * limit))
    if loop:
        return ModelResponse(parts=[ToolCallPart("search_memory", {"query": "budget"})],
                             usage=usage)
    if info.output_tools:  # structured output (fact extraction): no facts
        tool = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(tool.name, {"facts": []})], usage=usage)
    return ModelResponse(parts=[TextPart("ok " + str(len(texts)))], usage=usage)


model = FunctionModel(respond, model_name="metered")

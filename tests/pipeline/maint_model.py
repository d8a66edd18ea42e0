"""A scripted model for the maintenance tests (``[model] provider = "function"``).

Turns: a message containing ``FAIL`` makes the model raise an error whose message
carries the model key (``$PNC_TEST_FAKE_KEY``), as a careless provider SDK might;
``FAIL429`` raises a rate-limit error instead (transient). Anything else gets "ok".
Reflection requests (recognized by their instructions) are answered with a lesson that
echoes the whole failure report, so any secret in the report would reach the file.
With ``PNC_TEST_REDIS_URL`` set, each reflection request is counted in
``test:reflect-calls`` (and in ``test:reflect-saw-key`` when its report held the key).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

KEY_ENV = "PNC_TEST_FAKE_KEY"
REFLECT_MARK = "reflection step"
_clients: dict[str, Any] = {}


def _count(name: str) -> None:
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if not url:
        return
    if url not in _clients:  # one Valkey per test: keep a client per URL
        import redis

        _clients[url] = redis.Redis.from_url(url)
    _clients[url].incr(name)


def _user_text(messages: list[ModelMessage]) -> str:
    parts: list[str] = []
    for m in messages:
        for part in m.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str) and part.part_kind == "user-prompt":
                parts.append(content)
    return "\n".join(parts)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    user = _user_text(messages)
    if REFLECT_MARK in (info.instructions or ""):
        _count("test:reflect-calls")
        if os.environ.get(KEY_ENV) and os.environ[KEY_ENV] in user:
            _count("test:reflect-saw-key")
        return ModelResponse(parts=[TextPart("Lesson from the report: " + user)])
    if "FAIL429" in user:
        raise ModelHTTPError(429, "scripted", body={"error": "slow down"})
    if "FAIL" in user:
        raise RuntimeError(f"upstream refused key {os.environ.get(KEY_ENV, '?')} for this call")
    return ModelResponse(parts=[TextPart("ok")])


model = FunctionModel(respond, model_name="maint-scripted")

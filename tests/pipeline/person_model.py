"""The scripted model (``scripted.py``: ``ack <ids>``, ``BLOCK``) recording when each turn
enters and leaves the model, for tests whose turns all use one person's directory:
``test:person`` (Redis, ``PNC_TEST_REDIS_URL``) gets ``enter <pid>`` and ``exit <pid>``.
Two turns inside at once is what the person's lock must prevent."""

from __future__ import annotations

import os

import redis
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.pipeline import scripted


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    with redis.Redis.from_url(os.environ["PNC_TEST_REDIS_URL"], socket_timeout=5) as r:
        r.rpush("test:person", f"enter {os.getpid()}")
        try:
            return scripted.respond(messages, info)
        finally:
            r.rpush("test:person", f"exit {os.getpid()}")


model = FunctionModel(respond, model_name="person-scripted")

"""The extraction model of ``extract_model`` with its extraction call held open: it sets
``test:extracting`` in Redis (``PNC_TEST_REDIS_URL``) and then waits on
``test:release`` (60 s at most) before answering, as a slow model call would. Only the
first extraction call is held: a job that finds the group busy when it comes to write
reschedules itself and asks again for the turns queued meanwhile, and those calls must
not wait on a release the test already sent. Turns are answered at once."""

from __future__ import annotations

import os

import redis
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.pipeline import extract_model


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if info.output_tools:
        # short waits in a loop: the worker's process sets a default socket timeout
        with redis.Redis.from_url(os.environ["PNC_TEST_REDIS_URL"], socket_timeout=5) as r:
            if not r.set("test:extracting", "1", nx=True):
                return extract_model.respond(messages, info)
            for _ in range(60):
                if r.blpop(["test:release"], timeout=1):
                    break
    return extract_model.respond(messages, info)


model = FunctionModel(respond, model_name="extract-held")

"""A scripted model that accepts images (``[model] images = true``): it answers
``ack <message ids>`` and, with ``PNC_TEST_REDIS_URL`` set, records each turn in Redis
(``test:media_turns``: the ids, the prompt's text and every ``BinaryContent`` it was
given, as media type and SHA-256), so a test sees exactly what reached the model."""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from pydantic_ai import BinaryContent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

_ID = re.compile(r'<message id="([^"]+)"')


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for m in messages:
        for part in m.parts:
            if part.part_kind != "user-prompt":
                continue
            content = part.content
            for item in [content] if isinstance(content, str) else content:
                if isinstance(item, str):
                    texts.append(item)
                elif isinstance(item, BinaryContent):
                    images.append({"media_type": item.media_type,
                                   "sha256": hashlib.sha256(item.data).hexdigest()})
    prompt = "\n".join(texts)
    ids = _ID.findall(prompt)
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if url:
        import redis

        with redis.Redis.from_url(url) as r:
            r.rpush("test:media_turns", json.dumps({"ids": ids, "images": images,
                                                    "prompt": prompt}))
    return ModelResponse(parts=[TextPart("ack " + " ".join(ids))])


model = FunctionModel(respond, model_name="scripted-images")

"""A scripted model for pipeline tests (``[model] provider="function"``).

It answers ``ack <ids>`` listing the transcript's message ids in order, plus any
``MARK-...`` token found in core memory (the instructions), so tests can check what a
turn saw. With ``PNC_TEST_REDIS_URL`` set it records every turn in Redis:
``test:turns`` (JSON: group, ids, pid, texts, the prompt's "System note:" lines, the
whole prompt) and
``test:overlap`` (a group whose turns ran at the same time). A message whose text
contains ``BLOCK`` makes the model write its pid to ``$PNC_TEST_DIR/blocked.pid`` and
wait until ``$PNC_TEST_DIR/release`` exists. A message ``SILENT`` gets no reply. A
message holding ``echo[...]`` gets what the brackets hold quoted in the reply (``SEEN:
...``), as a model repeating a user's words does.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

_MSG = re.compile(r'<message id="([^"]+)"[^>]*>\n(.*?)\n</message>', re.S)
_CHAT = re.compile(r"Chat: (\S+?)\.(?:\s|$)")
_MARK = re.compile(r"MARK-[A-Za-z0-9]+")
_ECHO = re.compile(r"echo\[([^\]]*)\]")
_redis: Any = None


def _client() -> Any:
    global _redis
    url = os.environ.get("PNC_TEST_REDIS_URL")
    if not url:
        return None
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(url)
    return _redis


def _texts(messages: list[ModelMessage], info: AgentInfo) -> tuple[str, str]:
    """(instructions, user text)."""
    instructions = [info.instructions or ""]
    user: list[str] = []
    for m in messages:
        if getattr(m, "instructions", None):
            instructions.append(str(m.instructions))  # type: ignore[union-attr]
        for part in m.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                (instructions if part.part_kind == "system-prompt" else user).append(content)
    return "\n".join(instructions), "\n".join(user)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    instructions, user = _texts(messages, info)
    found = _MSG.findall(user)
    ids = [i for i, _ in found]
    texts = [t for _, t in found]
    chat = _CHAT.search(instructions + "\n" + user)
    group = chat.group(1) if chat else "?"
    r = _client()
    if r is not None:
        if int(r.incr(f"test:active:{group}")) > 1:
            r.rpush("test:overlap", group)
        notes = sorted({ln for ln in instructions.splitlines() if ln.startswith("System note:")})
        r.rpush("test:turns", json.dumps({"group": group, "ids": ids, "pid": os.getpid(),
                                          "texts": texts, "notes": notes,
                                          "prompt": instructions + "\n\n" + user}))
    try:
        if any("BLOCK" in t for t in texts):
            d = Path(os.environ["PNC_TEST_DIR"])
            if not (d / "release").exists():
                (d / "blocked.pid").write_text(str(os.getpid()))
                while not (d / "release").exists():
                    time.sleep(0.05)
        if float(os.environ.get("PNC_TEST_DELAY", "0")) > 0:
            time.sleep(float(os.environ["PNC_TEST_DELAY"]))
    finally:
        if r is not None:
            r.decr(f"test:active:{group}")
    if any(t.strip() == "SILENT" for t in texts):
        return ModelResponse(parts=[TextPart("NO_REPLY")])
    marks = sorted(set(_MARK.findall(instructions)))
    reply = "ack " + " ".join(ids)
    if marks:
        reply += " | " + " ".join(marks)
    if echoes := [e for t in texts for e in _ECHO.findall(t)]:
        reply += " | SEEN: " + "; ".join(echoes)
    return ModelResponse(parts=[TextPart(reply)])


model = FunctionModel(respond, model_name="scripted")

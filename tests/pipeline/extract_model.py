"""A scripted model for the extraction tests (``[model] provider = "function"``).

A turn gets "ok". An extraction request (the agent offers an output tool) is answered
with the structured output, read off the request's ``<message>`` lines by rule:

- "I moved to X" by S: "S moved to X" about S; "N moved to X": "N moved to X" about N;
- "N is vegan": "N is vegan" about N;
- "N lives in X": "N lives in X" about N.

A fact about an entity with a known "moved to" / "lives in" fact is an ``update``
replacing it. Each fact cites ``CITE`` (a message id) when set, else its own message.
Every extraction request is counted in ``CALLS``.

Corrections are flagged by message id, never by reading the text: ``CORRECTIONS`` maps
a message id to the (lesson, contradicted known fact ids) to answer when that message
is in the request. Every turn's whole prompt is kept in ``PROMPTS``.
"""

from __future__ import annotations

import html
import re
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

CALLS: list[str] = []
CITE: dict[str, str] = {}
CORRECTIONS: dict[str, tuple[str, list[str]]] = {}
PROMPTS: list[str] = []
_MSG = re.compile(r'<message id="([^"]*)" sender="([^"]*)" role="[^"]*"[^>]*>(.*?)</message>')
_KNOWN = re.compile(r'<known id="([^"]*)" about="([^"]*)">(.*?)</known>')
_RULES = [
    (re.compile(r"\bI moved to (\w+)"), lambda s, m: (s, f"{s} moved to {m[1]}")),
    (re.compile(r"\b([A-Z]\w+) moved to (\w+)"), lambda s, m: (m[1], f"{m[1]} moved to {m[2]}")),
    (re.compile(r"\b([A-Z]\w+) is vegan"), lambda s, m: (m[1], f"{m[1]} is vegan")),
    (re.compile(r"\b([A-Z]\w+) lives in (\w+)"), lambda s, m: (m[1], f"{m[1]} lives in {m[2]}")),
]


def _user_text(messages: list[ModelMessage]) -> str:
    return "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts
                     if p.part_kind == "user-prompt")


def facts_for(request: str) -> list[dict[str, Any]]:
    known = [(i, html.unescape(a), html.unescape(t)) for i, a, t in _KNOWN.findall(request)]
    out: list[dict[str, Any]] = []
    for mid, sender, raw in _MSG.findall(request):
        text = html.unescape(raw)
        for pattern, make in _RULES:
            m = pattern.search(text)
            if m is None:
                continue
            about, fact = make(html.unescape(sender), m)
            old = [i for i, a, t in known if a == about and (" moved to " in t
                                                             or " lives in " in t)]
            out.append({"about": about, "kind": "person", "fact": fact,
                        "message_ids": [CITE.get("id", mid)],
                        "relation": "update" if old else "new", "replaces": old})
            break
    return out


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not info.output_tools:
        PROMPTS.append("\n".join([info.instructions or "", *(
            str(getattr(m, "instructions", "") or "") for m in messages), *(
            str(getattr(p, "content", "")) for m in messages for p in m.parts)]))
        return ModelResponse(parts=[TextPart("ok")])
    request = _user_text(messages)
    CALLS.append(request)
    ids = [mid for mid, _, _ in _MSG.findall(request)]
    corrections = [{"message_id": mid, "lesson": CORRECTIONS[mid][0],
                    "contradicts": CORRECTIONS[mid][1]} for mid in ids if mid in CORRECTIONS]
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {
        "facts": facts_for(request), "corrections": corrections})])


model = FunctionModel(respond, model_name="extract-scripted")

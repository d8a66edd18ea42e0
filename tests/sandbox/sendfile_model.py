"""A scripted model for the ``send_file`` tests (``[model] provider="function"``).

"send report": writes ``report.txt`` then sends it with a caption; "send outside":
sends ``../CLAUDE.md``; "send big": makes a 2 MiB file and sends it. Each answers with
the last tool output it saw, so the test reads what the tool said.
"""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

REPORT = "quarterly numbers: 42\n"
PLANS = {
    "send report": [("write_file", {"path": "out/report.txt", "content": REPORT}),
                    ("send_file", {"path": "out/report.txt", "caption": "the report"})],
    "send outside": [("send_file", {"path": "../CLAUDE.md"})],
    "send big": [("run_command", {"command": "head -c 2097152 /dev/zero > big.bin"}),
                 ("send_file", {"path": "big.bin"})],
}


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = " ".join(str(p.content) for m in messages for p in m.parts
                      if isinstance(p, UserPromptPart))
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    # the latest request wins (earlier turns of the chat are in the prompt too)
    key = max(PLANS, key=prompt.rfind)
    plan = PLANS[key] if key in prompt else []
    if len(returns) < len(plan):
        tool, args = plan[len(returns)]
        return ModelResponse(parts=[ToolCallPart(tool, args)])
    return ModelResponse(parts=[TextPart(str(returns[-1].content) if returns else "nothing")])


model = FunctionModel(respond, model_name="sendfile-scripted")

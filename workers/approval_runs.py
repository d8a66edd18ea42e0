"""The turn an admin's ``/approve <id>`` starts: it runs exactly the recorded call.

The gateway puts a message from "approval <id>" (sender ``approval:<id>``) in the
group's mailbox. The worker that takes it claims the approval (``approved`` -> ``running``,
once: ``gateway.queue.approvals``), sends the recorded tool and arguments to the tool host
with the approval's id (the host checks the lock claim, the allowlist, and that the call
is the approved one), and keeps the result in the record, so a retried turn shows the same
output instead of running the call again. The model then sees the call and its output as
an ordinary tool exchange (``history``), at tool trust, and answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from channels.models import Inbound
from gateway.queue import Keys
from gateway.queue.approvals import APPROVAL_SENDER_PREFIX, ApprovalStore
from gateway.queue.toolcalls import ToolCall, ToolResult, call_tool
from workers.host_tools import HostLink, render_tool_output


@dataclass(frozen=True)
class ApprovedRun:
    """One approved call as the model is shown it: the call, and its rendered output."""

    approval_id: str
    tool: str
    args: dict[str, Any]
    output: str


def approval_ids(messages: Sequence[Inbound]) -> list[str]:
    return [m.sender_id[len(APPROVAL_SENDER_PREFIX):] for m in messages
            if m.sender_id.startswith(APPROVAL_SENDER_PREFIX)]


def run_approved(client: redis.Redis, keys: Keys, *, group: str, turn_id: str,
                 messages: Sequence[Inbound], link: HostLink | None) -> list[ApprovedRun]:
    """Run the approved calls the batch's approval messages name (blocking: each goes
    through the tool host). An approval that cannot run comes back as a failed call."""
    store = ApprovalStore(client, keys)
    runs = []
    for aid in approval_ids(messages):
        approval, refusal = store.claim_run(aid, group, turn_id)
        if approval is None or refusal is not None:
            runs.append(ApprovedRun(aid, "approval", {"id": aid},
                                    render_tool_output("approval", f"approval {aid}", False,
                                                       "", refusal or "unknown")))
            continue
        if approval.result:  # this turn ran it before a retry: never run it twice
            result = ToolResult.from_json(approval.result)
        elif link is None or not link.offers(approval.tool):
            result = ToolResult("", False, error=f"{approval.tool} is not available in "
                                "this chat now (the tool host is down or the tool is off)")
        else:
            result = call_tool(client, ToolCall(
                group=group, turn_id=turn_id, lock_token=link.lock_token,
                tool=approval.tool, args=approval.args, deadline=link.deadline,
                approval=aid), link.keys)
        if not approval.result:
            store.finish_run(aid, result.to_json())
        source = f"{approval.describe()} (approval {aid})"
        # the name the model knows the tool by ("server__tool" for an MCP tool)
        shown = next((o.model_name for o in link.mcp if o.name == approval.tool),
                     approval.tool) if link is not None else approval.tool
        runs.append(ApprovedRun(aid, shown, approval.args, render_tool_output(
            approval.tool, source, result.ok, result.output, result.error)))
    return runs


def history(user_prompt: str, runs: Sequence[ApprovedRun]) -> list[ModelMessage]:
    """The conversation the model continues: the turn's prompt, the approved calls as
    its own tool calls, their outputs as tool returns (data, never instructions)."""
    calls = [ToolCallPart(r.tool, r.args, tool_call_id=f"approval-{r.approval_id}")
             for r in runs]
    returns = [ToolReturnPart(r.tool, r.output, tool_call_id=f"approval-{r.approval_id}")
               for r in runs]
    return [ModelRequest(parts=[UserPromptPart(user_prompt)]), ModelResponse(parts=calls),
            ModelRequest(parts=returns)]

"""Tool calls between a worker and the tool host, over Redis: the wire and its keys.

A worker pushes a ``ToolCall`` (group, turn id, the group lock's token, the tool, its
arguments, the drain job's deadline) onto ``tools:calls`` and waits on its own result
list ``tools:result:{call}``; the tool host (``gateway.toolhost``) pops calls, checks the
claim against ``lock:{group}`` before it runs anything, runs the tool and pushes one
``ToolResult``. The worker waits at most until the deadline, so a hanging tool (or no
tool host at all) comes back as a failed call and the turn goes on. The host keeps
``tools:host`` alive (a short TTL) with what it offers, e.g. why the sandbox is off.

::

    worker ── RPUSH tools:calls {call} ──▶ host: BLPOP; GET lock:{g} == token? allowed?
    worker ◀── BLPOP tools:result:{id} ── host: RPUSH + EXPIRE (result or refusal)
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from gateway.queue.keys import Keys

#: seconds a result waits for its caller (who may have given up)
RESULT_TTL = 60
#: seconds ``tools:host`` lives without the host renewing it
HOST_TTL = 10


def calls_key(keys: Keys) -> str:
    return f"{keys.prefix}tools:calls"


def result_key(keys: Keys, call_id: str) -> str:
    return f"{keys.prefix}tools:result:{call_id}"


def host_key(keys: Keys) -> str:
    return f"{keys.prefix}tools:host"


@dataclass(frozen=True)
class ToolCall:
    """One call; ``lock_token`` proves the caller runs ``group``'s turn right now."""

    group: str
    turn_id: str
    lock_token: str
    tool: str
    args: dict[str, Any]
    #: wall-clock time (epoch seconds) after which nobody waits for the result
    deadline: float
    call_id: str = field(default_factory=lambda: secrets.token_hex(12))
    #: the approval this call runs (``gateway.queue.approvals``), for a tool that needs one
    approval: str = ""
    #: the n-th call of this tool with these arguments in this attempt of the turn
    #: (1, 2, ...; 0: not numbered): with the turn id, what a retry's call is matched
    #: by, so a call with effects runs once (``gateway.queue.toolonce``)
    ordinal: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> ToolCall:
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("args"), dict):
            raise ValueError("a tool call is a JSON object with an 'args' object")
        return cls(group=str(data["group"]), turn_id=str(data["turn_id"]),
                   lock_token=str(data["lock_token"]), tool=str(data["tool"]),
                   args=data["args"], deadline=float(data["deadline"]),
                   call_id=str(data["call_id"]), approval=str(data.get("approval", "")),
                   ordinal=int(data.get("ordinal", 0)))


@dataclass(frozen=True)
class ToolResult:
    """What a call gave: ``ok`` False when it was refused, failed or timed out (``error``
    says which, for the model)."""

    call_id: str
    ok: bool
    output: str = ""
    error: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> ToolResult:
        data = json.loads(raw)
        return cls(call_id=str(data["call_id"]), ok=bool(data["ok"]),
                   output=str(data.get("output", "")), error=str(data.get("error", "")))


def call_tool(client: redis.Redis, call: ToolCall, keys: Keys | None = None) -> ToolResult:
    """Send ``call`` to the tool host and wait for its result, at most until its
    deadline. Never raises for a tool's failure: a failed ``ToolResult`` says why."""
    keys = keys or Keys()
    left = call.deadline - time.time()
    if left <= 0:
        return ToolResult(call.call_id, False, error="no time left in this turn")
    try:
        client.rpush(calls_key(keys), call.to_json())
        got = client.blpop([result_key(keys, call.call_id)], timeout=max(math.ceil(left), 1))
    except (redis.RedisError, OSError) as err:
        return ToolResult(call.call_id, False, error=f"the tool host is unreachable ({err})")
    if got is None:
        return ToolResult(call.call_id, False,
                          error=f"no result within {left:.0f}s (the tool timed out or the "
                                "tool host is down)")
    try:
        return ToolResult.from_json(got[1])
    except (ValueError, KeyError) as err:
        return ToolResult(call.call_id, False, error=f"unreadable result ({err})")


def host_status(client: redis.Redis, keys: Keys | None = None) -> dict[str, Any] | None:
    """What the running tool host offers (``{"sandbox": None | "<why it is off>"}``),
    or None when no tool host is alive."""
    raw = client.get(host_key(keys or Keys()))
    if raw is None:
        return None
    data = json.loads(raw)
    return data if isinstance(data, dict) else None

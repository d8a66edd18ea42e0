"""A tool call with effects runs once per turn, whatever retries the turn: its record.

A turn retried after its worker died, or after the model request failed once a tool had
run, asks the model again, and the model asks for the same calls. A ``run_command`` that
appends to a file, a ``write_file``, an MCP tool that posts something would then act
twice. So the tool host keeps, per call, a record in the turn's hash (``Keys.tool_runs``,
so redaction finds a turn's outputs with the rest of its state) under a stable field: a
hash of the group, tool and arguments, and the call's ordinal among the identical calls
of that attempt (``ToolCall.ordinal``, numbered by the worker: the second identical
``echo x >> log`` in one attempt is a call of its own, the first one of a retry is the
first one of the earlier attempt).

States of one field::

    (none) --claim, just before the tool runs--> started --finish--> done (the result)

A claim that finds ``done`` returns the stored result, marked as such; one that finds
``started`` (the host died mid-call, or the earlier attempt's call still runs) says its
outcome is unknown and runs nothing. The tools in ``RERUNS`` only read (or, for
``send_file``, only read the file: the worker's send is deduped by its reply id, which
names the turn and the file's hash), so they rerun and pay no Redis round trip here;
so do the MCP tools an operator lists in a server's ``rerun`` (``gateway.config.mcp``).
Records live ``TTL`` seconds, their output cut to the tool output cap.
"""

from __future__ import annotations

import hashlib
import json

import redis

from gateway.queue.approvals import canonical_args
from gateway.queue.events import as_str
from gateway.queue.keys import Keys
from gateway.queue.toolcalls import ToolCall, ToolResult

#: the tools that may simply rerun on a retry: no record is kept for them
RERUNS = frozenset({"read_file", "list_files", "fetch", "send_file"})
#: seconds a record is kept: past any retry of the turn (RQ's, the sweeper's, a dead
#: letter an operator retries within days)
TTL = 3 * 86_400
#: what a stored result is shown with
STORED = "(already ran in an earlier attempt of this turn; stored output)"
#: what a call whose earlier run never finished is answered
UNKNOWN = ("not run again: an earlier attempt of this turn started this same call and "
           "stopped before its result was recorded (the tool host or the worker died), so "
           "its outcome is unknown; check its effect instead of repeating it")
_STARTED = "started"


def recorded(call: ToolCall) -> bool:
    """Whether ``call`` is kept once: the worker numbered it and the tool has effects."""
    return call.ordinal > 0 and not call.approval and call.tool not in RERUNS


def once_field(call: ToolCall) -> str:
    """The call's field in its turn's hash (``Keys.tool_runs``)."""
    digest = hashlib.sha256("\x1f".join([call.group, call.tool, canonical_args(call.args)])
                            .encode()).hexdigest()[:24]
    return f"{digest}:{call.ordinal}"


def claim(client: redis.Redis, keys: Keys, call: ToolCall) -> ToolResult | None:
    """Mark ``call`` started and return None (run it), or return what an earlier attempt
    of the turn left: its stored result, or the unknown outcome. One round trip."""
    key, field = keys.tool_runs(call.turn_id), once_field(call)
    pipe = client.pipeline()  # MULTI: HSETNX, the TTL, then what the field holds
    pipe.hsetnx(key, field, _STARTED)
    pipe.expire(key, TTL)
    pipe.hget(key, field)
    claimed, _, earlier = pipe.execute()
    if claimed or earlier is None:
        return None
    raw = as_str(earlier)
    if raw == _STARTED:
        return ToolResult(call.call_id, False, error=UNKNOWN)
    stored = ToolResult.from_json(raw)
    return ToolResult(call.call_id, stored.ok, output=f"{STORED}\n{stored.output}",
                      error=stored.error)


def finish(client: redis.Redis, keys: Keys, call: ToolCall, result: ToolResult,
           cap: int) -> None:
    """Keep ``result`` (its output cut to ``cap`` characters) for the turn's retries."""
    kept = {"call_id": result.call_id, "ok": result.ok, "output": result.output[:cap],
            "error": result.error[:cap]}
    client.hset(keys.tool_runs(call.turn_id), once_field(call), json.dumps(kept))

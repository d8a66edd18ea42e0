"""A tool host with canned answers, speaking the real wire (``gateway.queue.toolcalls``).

It stands in for what the real tool host does not run yet (an MCP server's tool, a
fetched web page): it pops ``ToolCall``s from its own key prefix, checks the caller's lock
token against ``lock:{group}`` the way ``gateway.toolhost.host`` does, and answers a call
whose command it knows with that canned output. Every other call is passed on, unchanged,
to the real tool host (the default prefix) and its answer relayed back, so whatever the
model does next (``cat`` another group's file...) still meets the real sandbox.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping

import redis

from gateway.queue import Keys
from gateway.queue.toolcalls import (
    HOST_TTL,
    RESULT_TTL,
    ToolCall,
    ToolResult,
    calls_key,
    host_key,
    result_key,
)

#: seconds one BLPOP waits before the loop looks at ``stop`` again
POP_WAIT = 0.5


def canned_key(call: ToolCall) -> str:
    """What a canned answer is looked up by: the command, or the path read."""
    return str(call.args.get("command", call.args.get("path", "")))


class CannedToolHost:
    """Serves ``keys``' tool calls from ``answers`` ((group, command or path) -> output),
    forwarding the rest to the real host under ``upstream``; a thread, ``with``-managed."""

    def __init__(self, client: redis.Redis, answers: Mapping[tuple[str, str], str], *,
                 keys: Keys, upstream: Keys) -> None:
        self.client = client
        self.answers = answers
        self.keys = keys
        self.upstream = upstream
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="canned-toolhost",
                                        daemon=True)

    def __enter__(self) -> CannedToolHost:
        self.client.set(host_key(self.keys), json.dumps({"sandbox": None}), ex=HOST_TTL)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.client.delete(host_key(self.keys))

    def _serve(self) -> None:
        while not self._stop.is_set():
            self.client.set(host_key(self.keys), json.dumps({"sandbox": None}), ex=HOST_TTL)
            got = self.client.blpop([calls_key(self.keys)], timeout=POP_WAIT)
            if got is None:
                continue
            call = ToolCall.from_json(got[1])
            result = self.handle(call)
            key = result_key(self.keys, call.call_id)
            self.client.rpush(key, result.to_json())
            self.client.expire(key, RESULT_TTL)

    def handle(self, call: ToolCall) -> ToolResult:
        holder = self.client.get(self.keys.lock(call.group))
        if holder is None or holder.decode() != call.lock_token or not call.lock_token:
            return ToolResult(call.call_id, False,
                              error="refused: the caller does not hold this group's turn lock")
        canned = self.answers.get((call.group, canned_key(call)))
        if canned is not None:
            return ToolResult(call.call_id, True, output=canned)
        self.client.rpush(calls_key(self.upstream), call.to_json())
        got = self.client.blpop([result_key(self.upstream, call.call_id)],
                                timeout=max(int(call.deadline - time.time()), 1))
        if got is None:
            return ToolResult(call.call_id, False, error="the real tool host did not answer")
        return ToolResult.from_json(got[1])

"""The tool host: one process per host (``pynanoclaw tools``) that runs tools for workers.

It pops ``ToolCall``s from Redis (``gateway.queue.toolcalls``) and, for each, before
running anything: checks the claim (the call's lock token is the one ``lock:{group}``
holds now, so only the worker running that group's turn can act for it), then the
group's allowlist (``[tools]``), then the time left (never past the drain job's deadline,
never past the sandbox's own timeout). A tool that fails, raises or hangs comes back as a
failed result; the host goes on. It holds no channel token and no model key
(``gateway.toolhost.process`` builds its environment). A ``server.tool`` call goes, after
the claim, to the MCP servers' hub (``gateway.toolhost.mcp``), which checks the group's
``mcp`` allowlist and its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from gateway.config import Settings
from gateway.config.tools import GroupPolicy
from gateway.queue import Keys, toolonce
from gateway.queue.approvals import ApprovalStore
from gateway.queue.toolcalls import (
    HOST_TTL,
    RESULT_TTL,
    ToolCall,
    ToolResult,
    calls_key,
    host_key,
    result_key,
)
from gateway.toolhost.fetch import Fetcher, with_fetch
from gateway.toolhost.mcp import McpHub
from gateway.toolhost.sandbox import Sandbox, SandboxSpec, SandboxUnavailable
from gateway.toolhost.sendfile import send_file
from gateway.toolhost.skillmounts import skill_mounts
from gateway.toolhost.tools import (
    Handler,
    ToolContext,
    ToolFailed,
    ToolRegistry,
    failed,
    sandbox_registry,
)
from gateway.toolhost.workspace import MountRefused, resolve_mounts, workspace_dir

log = logging.getLogger(__name__)

#: seconds one BLPOP waits before the loop looks at ``stop`` and the heartbeat again
POP_WAIT = 1.0
#: seconds kept for the reply to travel back before the caller's deadline
MARGIN = 1.0


class ToolHost:
    """Serves tool calls from Redis until ``stop`` is set."""

    def __init__(self, settings: Settings, client: redis.Redis, *,
                 sandbox: Sandbox | None = None, registry: ToolRegistry | None = None,
                 keys: Keys | None = None) -> None:
        self.settings = settings
        self.client = client
        self.keys = keys or Keys()
        self.sandbox = sandbox or Sandbox(host_uid=settings.tools.sandbox_uid)
        self.registry = registry or with_fetch(sandbox_registry(), Fetcher(),
                                               settings.tools.fetch)
        if registry is None:  # the fifth sandbox tool, in a module of its own
            self.registry.register("send_file", send_file)
        self._tasks: set[asyncio.Task[None]] = set()
        #: the MCP servers' sessions (``gateway.toolhost.mcp``); they get the host's env
        self.mcp = McpHub(settings.tools.mcp, os.environ) if settings.tools.mcp else None

    def status(self) -> dict[str, Any]:
        """What this host offers, for workers and ``pynanoclaw status``."""
        status: dict[str, Any] = {"sandbox": self.sandbox.unavailable()}
        if self.mcp is not None:
            status["mcp"] = self.mcp.offers()
        return status

    def heartbeat(self) -> None:
        self.client.set(host_key(self.keys), json.dumps(self.status()), ex=HOST_TTL)

    async def serve(self, stop: asyncio.Event) -> None:
        reason = self.sandbox.unavailable()
        if reason:
            log.warning("%s; sandbox tools are off", reason)
        if self.mcp is not None:
            await self.mcp.start()
        last_beat = 0.0
        while not stop.is_set():
            if time.monotonic() - last_beat > HOST_TTL / 3:
                with contextlib.suppress(redis.RedisError, OSError):
                    await asyncio.to_thread(self.heartbeat)
                last_beat = time.monotonic()
            try:
                got = await asyncio.to_thread(self.client.blpop, [calls_key(self.keys)],
                                              POP_WAIT)
            except (redis.RedisError, OSError) as err:
                log.warning("tool host: Redis: %s", err)
                await asyncio.sleep(POP_WAIT)
                continue
            if got is None:
                continue
            task = asyncio.get_running_loop().create_task(self._serve_one(got[1]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for task in list(self._tasks):
            task.cancel()
        if self.mcp is not None:
            await self.mcp.close()
        with contextlib.suppress(redis.RedisError, OSError):
            self.client.delete(host_key(self.keys))

    async def _serve_one(self, raw: bytes | str) -> None:
        try:
            call = ToolCall.from_json(raw)
        except (ValueError, KeyError, TypeError) as err:
            log.warning("tool host: unreadable call skipped: %s", err)
            return
        result = await self.handle(call)
        try:
            await asyncio.to_thread(self._reply, call.call_id, result)
        except (redis.RedisError, OSError) as err:
            log.warning("tool host: could not return the result of %s: %s", call.call_id, err)

    def _reply(self, call_id: str, result: ToolResult) -> None:
        key = result_key(self.keys, call_id)
        pipe = self.client.pipeline()
        pipe.rpush(key, result.to_json())
        pipe.expire(key, RESULT_TTL)
        pipe.execute()

    async def handle(self, call: ToolCall) -> ToolResult:
        """Check ``call`` and run it; never raises."""
        holder = await asyncio.to_thread(self.client.get, self.keys.lock(call.group))
        if isinstance(holder, bytes):
            holder = holder.decode()
        if holder is None or holder != call.lock_token or not call.lock_token:
            return failed(call, "refused: the caller does not hold this group's turn lock")
        policy = self.settings.tools.for_group(call.group)
        if call.tool in policy.approve:  # only the exact call an admin approved
            why = await asyncio.to_thread(ApprovalStore(self.client, self.keys).authorize,
                                          call.approval, call.group, call.tool, call.args)
            if why is not None:
                return failed(call, why)
        if (hub := self.mcp) is not None and hub.routes(call.tool):
            return await self._once(call, lambda: hub.handle(
                call, policy, call.deadline - time.time() - MARGIN,
                self.settings.tools.limits.output_bytes))
        if call.tool not in policy.allowed:
            return failed(call, f"refused: the tool {call.tool!r} is not allowed in this chat")
        handler = self.registry.get(call.tool)
        if handler is None:
            return failed(call, f"unknown tool {call.tool!r}")
        limits = self.settings.tools.limits
        timeout = min(call.deadline - time.time() - MARGIN, limits.timeout)
        if timeout <= 0:
            return failed(call, "no time left in this turn")
        return await self._once(call, lambda: self._run(call, policy, handler, timeout))

    async def _once(self, call: ToolCall,
                    run: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
        """``run()``, at most once per turn for a call with effects: recorded as started
        just before it runs and its result kept after, so a retried turn asking for the
        same call gets the stored result, or is told its outcome is unknown
        (``gateway.queue.toolonce``). A read runs as is, with no round trip."""
        server, _, tool = call.tool.partition(".")
        mcp = self.settings.tools.mcp.get(server) if tool else None
        if not toolonce.recorded(call) or (mcp is not None and tool in mcp.rerun):
            return await run()
        try:
            earlier = await asyncio.to_thread(toolonce.claim, self.client, self.keys, call)
        except (redis.RedisError, OSError, ValueError) as err:
            return ToolResult(call.call_id, False,
                              error=f"not run: its run could not be recorded ({err})")
        if earlier is not None:
            log.info("tool call %s: %s for %s (turn %s) not run again: %s", call.call_id,
                     call.tool, call.group, call.turn_id,
                     "stored result" if earlier.output.startswith(toolonce.STORED)
                     else "outcome unknown")
            return earlier
        result = await run()
        try:
            await asyncio.to_thread(toolonce.finish, self.client, self.keys, call, result,
                                    self.settings.tools.limits.output_bytes)
        except (redis.RedisError, OSError) as err:  # a retry is told "unknown", not rerun
            log.warning("tool host: could not keep the result of %s: %s", call.call_id, err)
        return result

    async def _run(self, call: ToolCall, policy: GroupPolicy, handler: Handler,
                   timeout: float) -> ToolResult:
        """Run a sandbox tool (or ``fetch``) checked by ``handle``; never raises."""
        limits = self.settings.tools.limits
        try:
            mounts = resolve_mounts(policy.mounts, self.settings.tools.mount_roots)
            workspace = await asyncio.to_thread(workspace_dir, self.settings.data_dir,
                                                call.group, self.sandbox.host_uid)
            spec = SandboxSpec(workspace, limits, network=policy.network,
                               mounts=(*mounts, *skill_mounts(self.settings.data_dir,
                                                              call.group)))
            ctx = ToolContext(call.group, self.sandbox, spec, timeout, policy=policy)
            # the sandbox stops the command at its timeout; this bounds the rest (setup)
            out = await asyncio.wait_for(handler(ctx, call.args), timeout + MARGIN)
        except TimeoutError:
            return failed(call, f"the tool did not finish within {timeout:.0f}s")
        except (ToolFailed, MountRefused, SandboxUnavailable) as err:
            return failed(call, str(err))
        except Exception as err:  # a tool's bug must not stop the host
            log.exception("tool %s failed for %s", call.tool, call.group)
            return failed(call, f"the tool failed ({type(err).__name__})")
        log.info("tool call %s: %s for %s (turn %s) ok=%s", call.call_id, call.tool,
                 call.group, call.turn_id, out.ok)
        return ToolResult(call.call_id, out.ok, output=out.text,
                          error="" if out.ok else "the command failed (see its output)")

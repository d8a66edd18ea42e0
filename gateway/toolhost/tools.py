"""The tool host's registry, and the sandbox tools in it.

A tool is an async function ``(ToolContext, args) -> ToolOutput`` under a name; the host
looks it up by the name a worker sent, after the claim and the group's allowlist are
checked. The four sandbox tools all run *inside* the group's sandbox (reading and writing
files too), so a symlink in the workspace resolves inside it, where nothing of the host
exists. MCP servers' tools are not here: the host routes ``server.tool`` calls to
``gateway.toolhost.mcp`` (a call needs the server's session, not a sandbox).
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.config.tools import GroupPolicy
from gateway.queue.toolcalls import ToolCall, ToolResult
from gateway.toolhost.sandbox import RunResult, Sandbox, SandboxSpec
from gateway.toolhost.workspace import INSIDE

log = logging.getLogger(__name__)

#: most bytes ``write_file`` takes in one call (the file-size limit still applies)
WRITE_MAX_BYTES = 1_000_000
LIST_MAX_DEPTH = 4


class ToolFailed(Exception):
    """The call cannot be run as asked (bad arguments, a refused path): the message is
    for the model."""


@dataclass(frozen=True)
class ToolContext:
    """What one call may use: its group's sandbox, and how long it may take."""

    group: str
    sandbox: Sandbox
    spec: SandboxSpec
    timeout: float
    #: the group's resolved ``[tools]`` policy (``fetch`` reads its hosts from it)
    policy: GroupPolicy | None = None


@dataclass(frozen=True)
class ToolOutput:
    """A tool's text for the model, whether it succeeded, and where it came from (the
    source the prompt shows: the tool, and the command or path)."""

    text: str
    ok: bool = True
    source: str = ""


def failed(call: ToolCall, why: str) -> ToolResult:
    """``call`` refused or failed, logged; ``why`` is what the model is told."""
    log.info("tool call %s (%s, %s) refused or failed: %s", call.call_id, call.group,
             call.tool, why)
    return ToolResult(call.call_id, False, error=why)


Handler = Callable[[ToolContext, dict[str, Any]], Awaitable[ToolOutput]]


class ToolRegistry:
    """Tools by name."""

    def __init__(self) -> None:
        self._tools: dict[str, Handler] = {}

    def register(self, name: str, handler: Handler) -> None:
        if name in self._tools:
            raise ValueError(f"tool {name!r} is registered twice")
        self._tools[name] = handler

    def get(self, name: str) -> Handler | None:
        return self._tools.get(name)


def _text(args: dict[str, Any], key: str, *, default: str | None = None) -> str:
    value = args.get(key, default)
    if not isinstance(value, str):
        raise ToolFailed(f"'{key}' must be a string")
    return value


def workspace_path(args: dict[str, Any], *, default: str | None = None) -> str:
    """A path inside the workspace, as the sandbox sees it: the check every workspace
    tool uses."""
    raw = _text(args, "path", default=default).strip()
    if not raw or "\0" in raw:
        raise ToolFailed("'path' must be a file name in the workspace")
    full = posixpath.normpath(posixpath.join(INSIDE, raw))
    if full != INSIDE and not full.startswith(INSIDE + "/"):
        raise ToolFailed(f"'{raw}' is outside the workspace ({INSIDE})")
    return full


def _render(result: RunResult) -> str:
    parts = [f"exit code: {'none (stopped)' if result.exit_code is None else result.exit_code}"]
    for name, data in (("stdout", result.stdout), ("stderr", result.stderr)):
        if data:
            parts.append(f"--- {name} ---\n{data.decode('utf-8', errors='replace')}")
    parts += [f"note: {n}" for n in result.notes]
    return "\n".join(parts)


async def run_command(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    command = _text(args, "command")
    if not command.strip():
        raise ToolFailed("'command' is empty")
    result = await ctx.sandbox.run(ctx.spec, ["sh", "-c", command], timeout=ctx.timeout)
    return ToolOutput(_render(result), ok=result.ok, source=f"run_command: {command}")


async def read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    path = workspace_path(args)
    cap = ctx.spec.limits.output_bytes
    result = await ctx.sandbox.run(ctx.spec, ["head", "-c", str(cap), "--", path],
                                   timeout=ctx.timeout)
    if not result.ok:
        return ToolOutput(_render(result), ok=False, source=f"read_file: {path}")
    return ToolOutput(result.stdout.decode("utf-8", errors="replace"),
                      source=f"read_file: {path}")


async def write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    path = workspace_path(args)
    content = _text(args, "content").encode()
    if len(content) > WRITE_MAX_BYTES:
        raise ToolFailed(f"content is over {WRITE_MAX_BYTES} bytes")
    script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
    result = await ctx.sandbox.run(ctx.spec, ["sh", "-c", script, "sh", path], stdin=content,
                                   timeout=ctx.timeout)
    text = f"wrote {len(content)} bytes to {path}" if result.ok else _render(result)
    return ToolOutput(text, ok=result.ok, source=f"write_file: {path}")


async def list_files(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    path = workspace_path(args, default=".")
    result = await ctx.sandbox.run(
        ctx.spec, ["find", path, "-mindepth", "1", "-maxdepth", str(LIST_MAX_DEPTH),
                   "-printf", "%y %s %P\\n"], timeout=ctx.timeout)
    text = result.stdout.decode("utf-8", errors="replace") if result.ok else _render(result)
    return ToolOutput(text or "(empty)", ok=result.ok, source=f"list_files: {path}")


def sandbox_registry() -> ToolRegistry:
    """A registry holding the four sandbox tools."""
    registry = ToolRegistry()
    for handler in (run_command, read_file, write_file, list_files):
        registry.register(handler.__name__, handler)
    return registry

"""The tool host's line in ``pynanoclaw status``."""

from __future__ import annotations

from typing import Any

import redis

from gateway.config import Settings
from gateway.queue.toolcalls import host_status
from gateway.toolhost.process import wanted


def tools_line(client: redis.Redis, settings: Settings) -> tuple[bool, str] | None:
    """(ok, detail) of the sandbox tools, or None when no group may use a tool."""
    if not wanted(settings):
        return None
    status = host_status(client)
    if status is None:
        return False, ("no tool host is running (`pynanoclaw run` starts it; or run "
                       "`pynanoclaw tools`): sandbox tools are off")
    mcp = mcp_note(status, settings)
    if status.get("sandbox"):
        return False, f"{status['sandbox']}; sandbox tools are off{mcp}"
    return True, f"tool host running, sandbox on{mcp}"


def mcp_note(status: dict[str, Any], settings: Settings) -> str:
    """``; MCP: n tool(s), down: a, b`` when MCP servers are configured, else ``""``."""
    if not settings.tools.mcp:
        return ""
    listed = status.get("mcp")
    offered: list[Any] = listed if isinstance(listed, list) else []
    up = {str(t.get("server")) for t in offered if isinstance(t, dict)}
    down = sorted(set(settings.tools.mcp) - up)
    return f"; MCP: {len(offered)} tool(s)" + (f", down: {', '.join(down)}" if down else "")

"""The tool host's line in ``pynanoclaw status``."""

from __future__ import annotations

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
    if status.get("sandbox"):
        return False, f"{status['sandbox']}; sandbox tools are off"
    return True, "tool host running, sandbox on"

"""The tool host as a process: its command line, its environment, its main loop.

``pynanoclaw run`` starts it like a worker (``gateway.operations._supervisor``), with its own
environment built from the allowlist alone: no channel token, no model key, nothing of
``[worker] pass_env``. The only secrets it gets are the variables MCP servers are named to
get (``[tools.mcp.<name>] env``): here, and in no other process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import redis

from gateway.config import Settings
from gateway.operations._supervisor import WorkerSupervisor, child_env

log = logging.getLogger(__name__)


def tools_env(settings: Settings, environ: Mapping[str, str], redis_url: str
              ) -> dict[str, str]:
    """The tool host's environment: the allowlist (PATH, HOME, locale, ...), the config
    path, the Redis URL and the variables named in ``[tools.mcp.*] env``. No model key, no
    channel token, no ``pass_env``."""
    return child_env(settings, environ, redis_url, also=settings.tools.mcp_secret_names())


def wanted(settings: Settings) -> bool:
    """Whether ``pynanoclaw run`` starts a tool host: some group may use a tool."""
    tools = settings.tools
    return (tools.sandbox or any(g.sandbox for g in tools.groups.values())
            or bool(tools.mcp) or bool(tools.fetch_hosts)
            or any(g.fetch_hosts for g in tools.groups.values()))


def tools_command(config: Path | None, *, log_level: str = "INFO") -> list[str]:
    """``python -m gateway.toolhost`` (the Redis URL travels in the environment)."""
    cmd = [sys.executable, "-m", "gateway.toolhost", "--log-level", log_level]
    if config is not None:
        cmd += ["--config", str(config)]
    return cmd


def tools_supervisor(settings: Settings, config: Path, redis_url: str, log_level: str
                     ) -> WorkerSupervisor | None:
    """The tool host of ``pynanoclaw run`` (one per host, restarted like a worker, with
    its own environment), or None when no group may use a tool."""
    if not wanted(settings):
        return None
    return WorkerSupervisor(1, tools_command(config, log_level=log_level),
                            env=tools_env(settings, os.environ, redis_url))


async def serve(settings: Settings, redis_url: str) -> None:
    """Run the tool host until SIGINT or SIGTERM."""
    # here, not at the top: `pynanoclaw run` and `chat` import this module for
    # tools_supervisor, and the host's MCP SDK alone costs them half a second at start
    from gateway.toolhost.host import ToolHost

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    client = redis.Redis.from_url(redis_url, socket_timeout=30)
    host = ToolHost(settings, client)
    try:
        log.info("tool host running (sandbox: %s)", host.sandbox.unavailable() or "on")
        await host.serve(stop)
    finally:
        host.sandbox.close()
        client.close()

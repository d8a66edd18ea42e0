"""``pynanoclaw tools``: the tool host, one per host; ``pynanoclaw run`` starts it."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from gateway.operations._cliparts import NO_REDIS_URL, fail, load, sub_app
from gateway.operations._redis_server import bot_redis_url
from gateway.toolhost.process import serve, tools_env
from gateway.toolhost.process import tools_command as command


def run_tools(config: str | None, redis_url: str | None, log_level: str) -> None:
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _, settings = load(Path(config) if config else None, channels=False)
    url = redis_url or bot_redis_url(settings)
    if not url:
        raise fail(NO_REDIS_URL)
    asyncio.run(serve(settings, url))


host_app = sub_app()


@host_app.command()
def host(
    config: Annotated[str | None, typer.Option(help="config file")] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis URL")] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR")] = "INFO",
) -> None:
    """The tool host itself (what ``pynanoclaw tools`` runs, in its own environment)."""
    run_tools(config, redis_url, log_level)


def tools_command(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="config file")] = None,
    redis_url: Annotated[str | None, typer.Option(
        "--redis-url", help="[default: [redis] url or the local embedded server]")] = None,
    log_level: Annotated[str, typer.Option("--log-level")] = "INFO",
) -> None:
    """The tool host (one per host; `pynanoclaw run` starts it when [tools] turns a tool
    on): runs each group's sandboxed commands and the MCP servers for the workers."""
    path, cfg = load(config, channels=False)
    cmd = command(path, log_level=log_level)
    url = redis_url or bot_redis_url(cfg) or ""
    # replaces this process, with the tool host's allowlisted environment
    os.execve(cmd[0], cmd, tools_env(cfg, os.environ, url))  # noqa: S606

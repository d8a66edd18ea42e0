"""MCP servers run by the tool host, through the official ``mcp`` SDK.

``McpHub`` keeps one client session per ``[tools.mcp.<name>]`` server (a stdio child or a
streamable-HTTP client), each in its own task: connect, list the tools, then ping it
every ``PING_EVERY`` seconds; a server that dies or stops answering is reconnected with
a capped backoff, and offers no tool while it is down. Its tools are registered as
``server.tool`` (the name on the wire and in the allowlists; the model sees
``mcp_content.model_name``), listed again when the server says they changed, and
published in the host's heartbeat with their input schemas, which is how workers learn
what to offer.

The host holds no model key: the session keeps the SDK's default callbacks, which
advertise neither sampling nor elicitation and answer any such request from a server
with an error. Secrets: a server's ``env`` values live here and in its child only; every
error and every output of a server's tools is scrubbed of them before it goes anywhere
(the model), and so is every log record of the process (``logscrub``), the child's
stderr included (relayed line by line). A call gets min(the server's ``timeout``, the
time left before the drain job's deadline) and the host's output cap; a failure is a
failed result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from channels.redact import redact
from gateway import wait_any
from gateway.config.mcp import ENV_REF, McpServer, allows
from gateway.config.tools import GroupPolicy
from gateway.queue.toolcalls import ToolCall, ToolResult
from gateway.toolhost.logscrub import scrub_logs
from gateway.toolhost.mcp_content import model_name, render_result
from gateway.toolhost.tools import failed

log = logging.getLogger(__name__)
#: what stdio servers write on their stderr, line by line, scrubbed of their secrets
server_log = logging.getLogger(f"{__name__}.stderr")

#: seconds a server has to start and answer ``initialize`` and ``tools/list``
CONNECT_TIMEOUT = 20.0
#: seconds the host's start waits for the servers' first listing (a slow one joins the
#: heartbeat later; the host serves calls meanwhile)
START_WAIT = 5.0
#: seconds between liveness pings of a connected server, and how long one may take
PING_EVERY = 5.0
PING_TIMEOUT = 5.0
#: reconnect backoff, seconds: doubled after each failure up to the cap
BACKOFF_MIN = 0.5
BACKOFF_MAX = 30.0


@dataclass(frozen=True)
class McpTool:
    """One tool of one server, as workers are told about it."""

    server: str
    tool: str
    description: str
    schema: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.server}.{self.tool}"

    def offer(self) -> dict[str, Any]:
        return {"name": self.name, "model_name": model_name(self.server, self.tool),
                "server": self.server, "description": self.description,
                "schema": self.schema}


class McpLink:
    """One server's session, kept alive by ``run`` until ``stop`` is set."""

    def __init__(self, name: str, config: McpServer, environ: Mapping[str, str]) -> None:
        self.name = name
        self.config = config
        self._env = {n: environ[n] for n in config.env if n in environ}
        self.missing = [n for n in config.env if n not in environ]
        self.session: ClientSession | None = None
        self.tools: dict[str, McpTool] = {}
        self.tried = asyncio.Event()  # the first connection attempt ended (either way)
        self._dead = asyncio.Event()
        self._changed = asyncio.Event()  # the server said its tool list changed

    def secrets(self) -> list[str]:
        return list(self._env.values())

    def scrub(self, text: str) -> str:
        """``text`` without this server's secret values."""
        return redact(text, *self._env.values())

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = self.config
        if cfg.command is not None:
            params = StdioServerParameters(command=cfg.command, args=cfg.args, env=self._env)
            # the child's stderr goes through us, not straight to the host's: a server
            # may print its own secret, and the host's log must not carry it
            read_fd, write_fd = os.pipe()
            relay = asyncio.create_task(self._relay(read_fd))
            try:
                with os.fdopen(write_fd, "w") as errlog:
                    async with stdio_client(params, errlog=errlog) as (read, write):
                        yield read, write
            finally:
                with contextlib.suppress(TimeoutError):  # EOF once the child is gone
                    await asyncio.wait_for(asyncio.shield(relay), 2)
                relay.cancel()
            return
        assert cfg.url is not None
        headers = {k: ENV_REF.sub(lambda m: self._env.get(m.group(1), ""), v)
                   for k, v in cfg.headers.items()}
        timeout = httpx.Timeout(cfg.timeout + PING_TIMEOUT, read=max(300.0, cfg.timeout))
        async with (create_mcp_http_client(headers=headers, timeout=timeout) as http,
                    streamable_http_client(cfg.url, http_client=http) as (read, write, _)):
            yield read, write

    async def _relay(self, fd: int) -> None:
        """Log each line the child writes on its stderr, scrubbed."""
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
        try:
            while line := await reader.readline():
                server_log.info("MCP server %s: %s", self.name,
                                self.scrub(line.decode(errors="replace").rstrip()))
        finally:
            transport.close()

    async def run(self, stop: asyncio.Event) -> None:
        backoff = BACKOFF_MIN
        while not stop.is_set():
            if self.missing:
                log.warning("MCP server %s: %s not set in the tool host's environment; "
                            "not started", self.name, ", ".join(self.missing))
                self.tried.set()
                return
            started = time.monotonic()
            try:
                await self._session(stop)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # any failure of a server: log it, reconnect
                log.warning("MCP server %s: %s", self.name, self.scrub(_reason(err)))
            finally:
                self.session, self.tools = None, {}
                self.tried.set()
            if stop.is_set():
                return
            if time.monotonic() - started > BACKOFF_MAX:
                backoff = BACKOFF_MIN  # it ran a while: a fresh failure, not a loop
            await wait_any(backoff, stop)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _session(self, stop: asyncio.Event) -> None:
        async with (self._streams() as (read, write),
                    ClientSession(read, write, message_handler=self._notified) as session):
            await asyncio.wait_for(session.initialize(), CONNECT_TIMEOUT)
            await asyncio.wait_for(self._list(session), CONNECT_TIMEOUT)
            self._dead.clear()
            self.session = session
            log.info("MCP server %s: %d tool(s)", self.name, len(self.tools))
            self.tried.set()
            while not stop.is_set() and not self._dead.is_set():
                if self._changed.is_set():
                    self._changed.clear()
                    await asyncio.wait_for(self._list(session), CONNECT_TIMEOUT)
                    log.info("MCP server %s: now %d tool(s)", self.name, len(self.tools))
                    continue
                if not await wait_any(PING_EVERY, stop, self._dead, self._changed):
                    await asyncio.wait_for(session.send_ping(), PING_TIMEOUT)
            if self._dead.is_set():
                raise ConnectionError("the connection was lost")

    async def _notified(self, message: Any) -> None:
        """The session's message handler: a changed tool list is listed again."""
        if isinstance(message, types.ServerNotification) and isinstance(
                message.root, types.ToolListChangedNotification):
            self._changed.set()

    async def _list(self, session: ClientSession) -> None:
        tools: dict[str, McpTool] = {}
        cursor: str | None = None
        while True:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
            for t in page.tools:
                tools[t.name] = McpTool(self.name, t.name, t.description or "",
                                        dict(t.inputSchema))
            cursor = page.nextCursor
            if not cursor:
                break
        self.tools = tools

    async def call(self, tool: str, args: dict[str, Any], timeout: float,
                   cap: int) -> tuple[bool, str, str]:
        """(ok, output, error) of one call; never raises."""
        session = self.session
        if session is None:
            return False, "", f"the MCP server {self.name!r} is down (reconnecting)"
        try:
            result = await asyncio.wait_for(
                session.call_tool(tool, args, read_timeout_seconds=timedelta(seconds=timeout)),
                timeout + 1)
        except TimeoutError:
            return False, "", f"the tool did not finish within {timeout:.0f}s"
        except McpError as err:
            if err.error.code == types.CONNECTION_CLOSED:
                self._dead.set()
            if err.error.code == httpx.codes.REQUEST_TIMEOUT:
                return False, "", f"the tool did not finish within {timeout:.0f}s"
            return False, "", self.scrub(f"the MCP server refused the call: "
                                         f"{err.error.message}")
        except Exception as err:  # a transport failure: reconnect
            self._dead.set()
            return False, "", self.scrub(f"the MCP server failed: {_reason(err)}")
        # a tool that reports an error (isError) still has output: the model reads it
        return (not result.isError, self.scrub(render_result(result, cap)),
                "the tool reported an error" if result.isError else "")


def _reason(err: BaseException) -> str:
    """One line for ``err``, looking inside the exception groups anyio raises."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"


class McpHub:
    """Every configured server; the tool host routes ``server.tool`` calls here."""

    def __init__(self, servers: Mapping[str, McpServer], environ: Mapping[str, str]) -> None:
        self.links = {name: McpLink(name, cfg, environ) for name, cfg in servers.items()}
        scrub_logs(v for link in self.links.values() for v in link.secrets())
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, wait: float = START_WAIT) -> None:
        """Start every server's session; wait (at most ``wait`` s) for each first try,
        so the host's first heartbeat already lists the tools."""
        for link in self.links.values():
            self._tasks.append(asyncio.create_task(link.run(self._stop)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(lk.tried.wait()
                                                    for lk in self.links.values())), wait)

    async def close(self) -> None:
        self._stop.set()
        _, pending = await asyncio.wait(self._tasks, timeout=10) if self._tasks else ((), ())
        for task in pending:
            task.cancel()

    def offers(self) -> list[dict[str, Any]]:
        """Every tool of every connected server, for the heartbeat."""
        return [t.offer() for link in self.links.values() if link.session is not None
                for t in link.tools.values()]

    def routes(self, name: str) -> bool:
        """Whether ``name`` (``server.tool``) is a configured server's."""
        return name.partition(".")[0] in self.links and "." in name

    async def handle(self, call: ToolCall, policy: GroupPolicy, left: float,
                     cap: int) -> ToolResult:
        """Run ``call`` (its claim already checked) if the group may; never raises."""
        server, _, tool = call.tool.partition(".")
        link = self.links[server]

        if not allows(policy.mcp, server, tool):
            return failed(call, f"refused: the tool {call.tool!r} is not allowed in this chat")
        if link.session is not None and tool not in link.tools:
            return failed(call, f"unknown tool {call.tool!r}")
        timeout = min(left, link.config.timeout)
        if timeout <= 0:
            return failed(call, "no time left in this turn")
        ok, output, error = await link.call(tool, call.args, timeout, cap)
        if not ok and not output:
            return failed(call, error)
        log.info("tool call %s: %s for %s (turn %s) ok=%s", call.call_id, call.tool,
                 call.group, call.turn_id, ok)
        return ToolResult(call.call_id, ok, output=output, error=error)

"""An MCP server for the tests, written with the SDK's FastMCP.

``python -m tests.sandbox.mcp_server stdio`` or ``... http PORT`` (streamable HTTP on
127.0.0.1, answering only requests with ``Authorization: Bearer $MCP_TEST_SECRET``).
Its secret is ``MCP_TEST_SECRET``: ``secret_hash`` proves it got it without showing it,
``leak`` returns it raw and ``fail`` raises quoting it (the tool host must scrub both),
``env_keys`` lists the names of its environment, ``hang`` never ends, ``ask_model`` asks
the client to sample, ``grow`` adds a tool and says so, ``die`` exits, ``tally`` counts
its calls (an effect a second run would show).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys

from mcp import McpError, types
from mcp.server.fastmcp import Context, FastMCP

SECRET_ENV = "MCP_TEST_SECRET"

server = FastMCP("t", log_level="WARNING")


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@server.tool()
def secret_hash() -> str:
    """A hash of this server's secret."""
    secret = os.environ.get(SECRET_ENV)
    return f"secret sha256 {secret_digest(secret)}" if secret else "no secret"


@server.tool()
def leak() -> str:
    """Returns the secret itself (a misbehaving server)."""
    print(f"debug: my token is {os.environ.get(SECRET_ENV, '')}", file=sys.stderr,
          flush=True)
    return f"the token is {os.environ.get(SECRET_ENV, '')}"


@server.tool()
def fail() -> str:
    """Raises, quoting its secret in the error."""
    raise ValueError(f"cannot log in with {os.environ.get(SECRET_ENV, '')}")


@server.tool()
def env_keys() -> str:
    """The names of this server's environment variables."""
    return " ".join(sorted(os.environ))


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "woke up"


@server.tool()
async def ask_model(ctx: Context) -> str:  # type: ignore[type-arg]
    """Asks the client's model for a completion (MCP sampling)."""
    caps = ctx.session.client_params.capabilities if ctx.session.client_params else None
    advertised = caps is not None and caps.sampling is not None
    try:
        await ctx.session.create_message(
            [types.SamplingMessage(role="user",
                                   content=types.TextContent(type="text", text="hi"))],
            max_tokens=5)
    except McpError as err:
        return f"sampling refused ({err.error.message}); advertised={advertised}"
    return f"sampling accepted; advertised={advertised}"


@server.tool()
def forbidden() -> str:
    """Not in any group's allowlist."""
    return "forbidden ran"


@server.tool()
async def grow(ctx: Context) -> str:  # type: ignore[type-arg]
    """Adds the tool ``grown`` and tells the client its tool list changed."""
    server.add_tool(lambda: "grown here", name="grown", description="Added at run time.")
    await ctx.session.send_tool_list_changed()
    return "grew"


_tally = [0]


@server.tool()
def tally() -> str:
    """Counts its calls in this server process."""
    _tally[0] += 1
    return f"tally {_tally[0]}"


@server.tool()
def die() -> str:
    """Exits the server process."""
    os._exit(3)


def _http(port: int) -> None:
    import logging

    import uvicorn
    from starlette.types import ASGIApp, Receive, Scope, Send

    expected = f"Bearer {os.environ[SECRET_ENV]}".encode()
    app = server.streamable_http_app()

    def guarded(inner: ASGIApp) -> ASGIApp:
        async def call(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and dict(scope["headers"]).get(
                    b"authorization") != expected:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no"})
                return
            await inner(scope, receive, send)
        return call

    # the SDK logs a traceback when a client ends its session (the host stopping): noise
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.CRITICAL)
    uvicorn.run(guarded(app), host="127.0.0.1", port=port, log_level="warning",
                lifespan="on")


if __name__ == "__main__":
    if sys.argv[1] == "http":
        _http(int(sys.argv[2]))
    else:
        server.run("stdio")

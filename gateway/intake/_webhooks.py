"""The gateway's one web server: every channel's webhook routes plus ``/healthz``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from channels.base import Channel

HealthCheck = Callable[[], Awaitable[dict[str, Any]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger(__name__)


@web.middleware
async def reject_deep_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A body nested too deeply to parse (``[[[[...`` 100,000 levels: Python's JSON
    parser raises ``RecursionError``) is bad input, so 400 with a log line on every
    route, never a 500 that makes the platform retry it forever. Each adapter should
    reject it itself; this is the net for any route that does not."""
    try:
        return await handler(request)
    except RecursionError:
        log.warning("%s %s: request body nested too deeply (%s bytes); rejected with 400",
                    request.method, request.path, request.content_length)
        return web.Response(status=400, text="malformed request: nested too deeply")


def build_app(channels: Sequence[Channel], health: HealthCheck) -> web.Application:
    """An aiohttp app mounting each channel's ``web_routes()`` and ``GET /healthz``:
    the JSON status, 200 while ``health()`` says ``up`` (degraded or not: a container
    health check must not restart a gateway that waits for one platform or for disk
    space), 503 when it cannot work (gateway/operations/_health.py)."""
    app = web.Application(client_max_size=4 * 1024 * 1024, middlewares=[reject_deep_json])

    async def healthz(request: web.Request) -> web.Response:
        status = await health()
        return web.json_response(status, status=200 if status.get("up") else 503)

    app.router.add_get("/healthz", healthz)
    for ch in channels:
        app.router.add_routes(ch.web_routes())
    return app


def has_routes(channels: Sequence[Channel]) -> bool:
    return any(ch.web_routes() for ch in channels)


class WebServer:
    """Runs the app on ``host:port`` until ``stop()``."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self.host = host
        self.port = port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        # port 0: learn which one the OS picked
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        await self._runner.cleanup()

"""The gateway's one web server: every channel's webhook routes plus ``/healthz``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from channels.base import Channel

HealthCheck = Callable[[], Awaitable[dict[str, Any]]]


def build_app(channels: Sequence[Channel], health: HealthCheck) -> web.Application:
    """An aiohttp app mounting each channel's ``web_routes()`` and ``GET /healthz``
    (200 with a JSON status when healthy, 503 when ``health()`` says ``ok: false``)."""
    app = web.Application(client_max_size=4 * 1024 * 1024)

    async def healthz(request: web.Request) -> web.Response:
        status = await health()
        return web.json_response(status, status=200 if status.get("ok") else 503)

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

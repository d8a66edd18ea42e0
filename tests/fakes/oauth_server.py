"""A local OAuth2 token endpoint (RFC 6749 section 6, refresh grant) and token
introspection endpoint (RFC 7662, what dovecot's oauth2 passdb asks), on loopback.

Shapes follow Google's: ``{"access_token", "expires_in", "token_type": "Bearer"}``
on success, ``400 {"error": "invalid_grant"}`` once the refresh token is revoked.
"""

from __future__ import annotations

import itertools
import time

from aiohttp import web

CLIENT_ID = "pnc-test-client.apps.example"
CLIENT_SECRET = "client-s3cret-Qm9vYmFy"
REFRESH_TOKEN = "1//refresh-t0ken-ZXhhbXBsZQ"


class TokenEndpoint:
    def __init__(self, username: str, lifetime: int = 3600) -> None:
        self.username = username
        self.lifetime = lifetime
        self.revoked = False
        self.issued: dict[str, float] = {}  # access token -> expiry (wall clock)
        self.grants = 0
        self.introspections: list[str] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    @property
    def introspection_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/introspect"

    def valid(self, token: str) -> bool:
        return not self.revoked and self.issued.get(token, 0) > time.time()

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return web.json_response({"error": "invalid_client"}, status=401)
        if form.get("grant_type") != "refresh_token":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if self.revoked or form.get("refresh_token") != REFRESH_TOKEN:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "Token expired or revoked."},
                status=400,
            )
        self.grants += 1
        token = f"ya29.access-{next(self._ids)}-Zm9v"
        self.issued[token] = time.time() + self.lifetime
        return web.json_response(
            {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}
        )

    async def _introspect(self, request: web.Request) -> web.Response:
        form = await request.post()
        token = str(form.get("token", ""))
        self.introspections.append(token)
        if self.valid(token):
            return web.json_response({"active": True, "username": self.username})
        return web.json_response({"active": False})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/token", self._token)
        app.router.add_post("/introspect", self._introspect)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

"""Files a fake platform serves (Slack's ``url_private``, Discord's CDN, WhatsApp's
media URLs), and every download asked of it, so a test can assert what was fetched or
that nothing was. With a ``token``, a download without ``Authorization: Bearer
<token>`` is refused as the platform refuses it."""

from __future__ import annotations

from aiohttp import web


class FileShelf:
    def __init__(self, token: str | None = None) -> None:
        self.token = token
        #: key (a file id) -> bytes
        self.files: dict[str, bytes] = {}
        #: keys asked for, in order, authorized or not
        self.downloads: list[str] = []

    async def serve(self, request: web.Request, key: str) -> web.Response:
        self.downloads.append(key)
        if self.token is not None and \
                request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=403, text="forbidden")
        data = self.files.get(key)
        if data is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=data, content_type="application/octet-stream")

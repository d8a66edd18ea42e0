"""A server's idle keep-alive timeout, the way clients meet it, for the aiohttp fakes.

``IdleTimeout.middleware`` plays a server (or a load balancer before it) that lets a
keep-alive connection go once it has been idle ``seconds``: the next request on it is
read and never handled, and the connection is reset unanswered. That is what a client
sees when it writes on a connection just as the server closes it (the keep-alive race),
made deterministic: the server's FIN has not reached the client, so only a client that
drops idle connections before ``seconds`` itself avoids it. Off (``seconds`` None) until
a test sets it.
"""

from __future__ import annotations

import socket
import struct
import time
from asyncio import BaseTransport

from aiohttp import web
from aiohttp.typedefs import Handler


class IdleTimeout:
    def __init__(self) -> None:
        self.seconds: float | None = None
        self.resets = 0  # requests dropped on a connection idle too long
        self._idle_since: dict[BaseTransport, float] = {}

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        assert transport is not None
        since = self._idle_since.pop(transport, None)
        if self.seconds is not None and since is not None \
                and time.monotonic() - since > self.seconds:
            self.resets += 1
            sock = transport.get_extra_info("socket")
            if sock is not None:  # linger 0: close with a reset, as a dead peer does
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
            return web.Response(status=500)  # never sent: the connection is gone
        try:
            return await handler(request)
        finally:
            if not transport.is_closing():
                self._idle_since[transport] = time.monotonic()

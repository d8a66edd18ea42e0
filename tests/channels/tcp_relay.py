"""A TCP relay on 127.0.0.1 in front of a real server, counting what the server sends on
each connection: a test sees how many bytes a client actually took from the server (a
capped download), and what the client asked for (``upstream``: a download that must never
happen), with the real protocol passing through untouched."""

from __future__ import annotations

import asyncio
import contextlib


class TcpRelay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        #: bytes the server sent, one entry per client connection, in connect order
        self.downstream: list[int] = []
        #: bytes the client sent, one entry per client connection, in connect order
        self.upstream: list[bytearray] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> TcpRelay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        index = len(self.downstream)
        self.downstream.append(0)
        self.upstream.append(bytearray())
        server_r, server_w = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                       count: bool) -> None:
            try:
                while data := await src.read(64 * 1024):
                    if count:
                        self.downstream[index] += len(data)
                    else:
                        self.upstream[index] += data
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(client_r, server_w, False), pipe(server_r, client_w, True))

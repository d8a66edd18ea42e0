"""A local web site for the fetch tests: a real aiohttp server on 127.0.0.2 (taken as
public by the fetcher's test override) and the same port on 127.0.0.1 (what a refused
fetch would have reached), counting every request by the address it came in on; and the
resolver seam's table of names."""

from __future__ import annotations

import contextlib
import gzip
import ssl
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

PUBLIC = "127.0.0.2"  # the test server, taken as public by the override
NAMES = {
    "docs.example.com": [PUBLIC],
    "www.docs.example.com": [PUBLIC],
    "loop.example.com": ["127.0.0.1"],
    "ten.example.com": ["10.1.2.3"],
    "six.example.com": ["::1"],
    "meta.example.com": ["169.254.169.254"],
    "mapped.example.com": [f"::ffff:{PUBLIC}"],
    "mixed.example.com": [PUBLIC, "10.0.0.1"],
    "internal.example.com": ["10.0.0.7"],
    "evil.test": [PUBLIC],
}
PAGE = """<!doctype html><html><head><title>Docs home</title>
<style>body { color: red }</style><script>steal(document.cookie)</script></head>
<body><h1>Hello</h1><p>World &amp; <b>more</b></p><noscript>enable js</noscript></body></html>"""
PNG = b"\x89PNG\r\n\x1a\n" + bytes(1000)


async def resolver(host: str, port: int) -> Sequence[str]:
    if host not in NAMES:
        raise OSError(f"no such name: {host}")
    return NAMES[host]


@dataclass
class Server:
    port: int
    hits: Counter[str]  # (address it was reached on) path -> requests


@contextlib.asynccontextmanager
async def serve_site(tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    hits: Counter[str] = Counter()
    port = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        hits[f"{sock[0] if sock else '?'}{request.path}"] += 1
        redirects = {"/to-page": "/page",
                     "/to-private": f"http://internal.example.com:{port}/page",
                     "/to-loopback": f"http://loop.example.com:{port}/page",
                     "/loop": "/loop"}
        if request.path in redirects:
            raise web.HTTPFound(redirects[request.path])
        if request.path == "/page":
            return web.Response(text=PAGE, content_type="text/html")
        if request.path == "/data.json":
            return web.Response(text='{"answer": 42}', content_type="application/json")
        if request.path == "/notes.txt":
            return web.Response(body="café".encode("latin-1"),
                                headers={"Content-Type": "text/plain; charset=latin-1"})
        if request.path == "/logo.png":
            return web.Response(body=PNG, content_type="image/png")
        if request.path == "/bomb.txt":  # 10 MB of zeros in 10 kB, sent though not asked
            return web.Response(body=gzip.compress(bytes(10_000_000)),
                                headers={"Content-Type": "text/plain",
                                         "Content-Encoding": "gzip"})
        if request.path == "/endless":  # never ends: only a reader that stops returns
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            with contextlib.suppress(ConnectionError):
                while True:
                    await resp.write(b"x" * 65536)
            return resp
        raise web.HTTPNotFound()

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, PUBLIC, 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    # the same port on 127.0.0.1: what a refused fetch would have reached
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
    yield Server(port, hits)
    await runner.cleanup()




def tls_pair(folder: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) TLS contexts for a self-signed certificate of ``name`` (the
    ``openssl`` command line, as Debian ships it)."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", f"/CN={name}", "-addext",
                    f"subjectAltName=DNS:{name}"], check=True, capture_output=True)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))

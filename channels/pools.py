"""The adapters' HTTP connection pools: keep-alive and connect retries, in one place.

A pooled connection the server closed while it sat idle is the commonest source of an
ambiguous send (issue 30): the client writes its request on it just as (or after) the
server let it go, and the connection drops with no answer, which the client cannot tell
from one dropped after the platform acted. So an idle connection is let go here before
a typical server's idle timeout, and a fresh connection is opened instead.

* ``KEEPALIVE_EXPIRY`` (1.5 s): below the shortest idle timeouts servers ship with
  (gunicorn 2 s; uvicorn, Node.js and Apache httpd 5 s; nginx 75 s, AWS ALB 60 s), and
  below the libraries' own defaults, which sit at or above them (httpx 5 s, aiohttp
  15 s). Chat traffic comes in bursts: the connection is reused within a burst (the
  chunks of one reply, the replies of a busy minute) and a quiet chat pays one new
  connection (a TLS handshake) per reply.
* ``CONNECT_RETRIES`` (2): httpx's transport retries a failed connect (refused, reset
  or timed out while connecting; nothing was written yet, so it cannot duplicate),
  never a request. aiohttp has no such option; there the outbox retries a connect
  failure, which is a safe ``NetworkError`` as well.

What stays ambiguous: a server that closes a connection in the middle of a request, or
one whose idle timeout is shorter than ours; those sends are ``MaybeSent`` and resolved
per platform (``Channel.find_sent``, idempotency keys).
"""

from __future__ import annotations

import aiohttp
import httpx

#: seconds an idle pooled connection is kept before it is closed instead of reused
KEEPALIVE_EXPIRY = 1.5
#: times httpx retries a failed connect (never a written request)
CONNECT_RETRIES = 2


def httpx_limits(max_connections: int | None = 100) -> httpx.Limits:
    """``httpx.Limits`` with our keep-alive (httpx's default pool size otherwise)."""
    return httpx.Limits(max_connections=max_connections, keepalive_expiry=KEEPALIVE_EXPIRY)


def httpx_transport(max_connections: int | None = 100) -> httpx.AsyncHTTPTransport:
    """An httpx transport with our keep-alive and connect retries. Give a client both
    this and ``httpx_limits``: a client with a ``transport`` ignores its own
    ``limits``, except for the proxy transports it makes from the environment."""
    return httpx.AsyncHTTPTransport(limits=httpx_limits(max_connections),
                                    retries=CONNECT_RETRIES)


def aiohttp_connector(limit: int = 100) -> aiohttp.TCPConnector:
    """An aiohttp connector with our keep-alive (``limit`` 0: no limit). Call it with
    the event loop running."""
    return aiohttp.TCPConnector(limit=limit, keepalive_timeout=KEEPALIVE_EXPIRY)

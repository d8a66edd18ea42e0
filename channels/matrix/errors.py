"""nio's error responses onto ``channels.errors``.

matrix-nio returns errors as ``ErrorResponse`` objects (``status_code`` is the Matrix
``errcode``, ``transport_response.status`` the HTTP status) instead of raising, and
raises aiohttp/asyncio errors for the network. The adapter runs nio with
``max_limit_exceeded=0`` so a 429 comes back here instead of being slept on inside nio.
A failure after the request may have reached the homeserver (a 5xx, a dropped
connection, a read timeout) is ``MaybeSent``; the send's transaction id makes its retry
safe (the homeserver answers the first event).
"""

from __future__ import annotations

from typing import Any

from aiohttp import ClientConnectorError, ClientError, ConnectionTimeoutError

from channels.errors import (
    ChannelError,
    MaybeSent,
    NetworkError,
    PermanentError,
    RateLimited,
    TransientError,
)

#: what a request to the homeserver raises when it cannot be reached or drops out
NETWORK_ERRORS = (ClientError, TimeoutError, OSError)
#: what to wait when a 429 carries no ``retry_after_ms`` (nio's own default)
DEFAULT_RETRY_AFTER = 5.0

_PERMANENT = {
    "M_FORBIDDEN": "forbidden",
    "M_UNKNOWN_TOKEN": "unauthorized",
    "M_MISSING_TOKEN": "unauthorized",
    "M_NOT_FOUND": "not_found",
    "M_TOO_LARGE": "too_large",
    "M_BAD_JSON": "bad_request",
    "M_NOT_JSON": "bad_request",
}


def http_status(response: Any) -> int | None:
    transport = getattr(response, "transport_response", None)
    status = getattr(transport, "status", None)
    return status if isinstance(status, int) else None


def map_error(response: Any) -> ChannelError:
    """The channel error for a nio ``ErrorResponse`` (its text has no secrets: Matrix
    error bodies carry an errcode and a human message only)."""
    errcode = str(getattr(response, "status_code", "") or "")
    message = str(getattr(response, "message", "") or "")
    status = http_status(response)
    if errcode == "M_LIMIT_EXCEEDED" or status == 429:
        retry_ms = getattr(response, "retry_after_ms", None)
        retry = retry_ms / 1000 if isinstance(retry_ms, int | float) else DEFAULT_RETRY_AFTER
        return RateLimited(retry, f"matrix: {errcode or 'rate limited'}")
    if status is not None and status >= 500:
        return MaybeSent(f"matrix: server error {status} {errcode}".rstrip())
    if errcode in _PERMANENT:
        return PermanentError(_PERMANENT[errcode], f"matrix {errcode}: {message}")
    if status is not None and 400 <= status < 500:
        return PermanentError(errcode.lower() or f"http_{status}", f"matrix: {message}")
    return TransientError(f"matrix: {errcode or 'unexpected answer'} {message}".rstrip())


def network_error(error: BaseException) -> NetworkError | MaybeSent:
    if isinstance(error, ClientConnectorError | ConnectionTimeoutError):
        return NetworkError(f"matrix: homeserver unreachable ({type(error).__name__})")
    # connected: the request may have been written and acted on
    return MaybeSent(f"matrix: homeserver failed mid-request ({type(error).__name__})")

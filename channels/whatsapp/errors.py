"""Cloud API failures mapped onto ``channels.errors``.

The Graph API answers a refused call with an HTTP 4xx/5xx and
``{"error": {"message", "type", "code", "error_data": {"details"}, "fbtrace_id"}}``;
pywa raises it as a ``WhatsAppError`` carrying ``code`` and the response
(developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes). Messages here
carry the operation and the numeric code only, never the token or a request body.

A failure after the request may have reached Meta (a 5xx, a dropped connection, a read
or write timeout) is ``MaybeSent``: counted, and re-sent (the Cloud API has no
idempotency key); one that never left (connect error or timeout, pool timeout) is a
plain ``NetworkError``.
"""

from __future__ import annotations

import httpx
from pywa.errors import WhatsAppError

from channels.errors import (
    ChannelError,
    MaybeSent,
    NetworkError,
    PermanentError,
    RateLimited,
    TransientError,
    retry_after_header,
)

__all__ = ["OUTSIDE_WINDOW", "OutsideWindow", "map_error"]

#: Throttling codes and what to wait when the answer names no ``Retry-After``:
#: 4 / 80007 app and WABA call limits (reset within the hour), 130429 throughput,
#: 131048 spam rate limit, 131056 pair rate limit ("1 message every 6 seconds to the
#: same user", Cloud API throughput docs).
RATE_LIMIT_WAIT = {4: 60.0, 80007: 60.0, 130429: 1.0, 131048: 60.0, 131056: 6.0}
#: "Something went wrong", service unavailable, server temporarily unavailable.
TRANSIENT_CODES = frozenset({1, 2, 131000, 131016, 133004})
#: Error 131047, "Re-engagement message": more than 24 hours since the user last wrote.
OUTSIDE_WINDOW = 131047
_AUTH_CODES = frozenset({0, 3, 10, 190}) | frozenset(range(200, 300))


class OutsideWindow(PermanentError):
    """A free-form message was refused: the 24-hour customer-service window is closed."""

    def __init__(self, message: str = "") -> None:
        super().__init__("outside_24h_window", message)


def _retry_after(error: WhatsAppError) -> float:
    response = error.raw_response
    return retry_after_header(response.headers if response is not None else None,
                              RATE_LIMIT_WAIT.get(error.code, 1.0))


def map_error(operation: str, error: BaseException) -> ChannelError:
    """Translate one pywa/httpx failure of ``operation`` to the shared error tree."""
    if isinstance(error, ChannelError):
        return error
    if isinstance(error, WhatsAppError):
        code = error.code
        status = error.status_code or 0
        where = f"whatsapp {operation}: error {code} (HTTP {status})"
        if code in RATE_LIMIT_WAIT or status == 429:
            return RateLimited(_retry_after(error), f"whatsapp {operation} rate limited ({code})")
        if code == OUTSIDE_WINDOW:
            return OutsideWindow(where)
        if status >= 500:
            return MaybeSent(where)
        if code in TRANSIENT_CODES or error.is_transient:
            return TransientError(where)
        if code in _AUTH_CODES:
            return PermanentError("auth_or_permission", where)
        # Unknown codes are permanent: retrying a refused request forever is worse.
        return PermanentError(f"whatsapp_error_{code}", where)
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return NetworkError(f"whatsapp {operation}: {type(error).__name__}")
    if isinstance(error, httpx.TransportError):
        # connected: the request may have been written and acted on
        return MaybeSent(f"whatsapp {operation}: {type(error).__name__}")
    return PermanentError("unexpected_error", f"whatsapp {operation}: {type(error).__name__}")

"""Map discord.py / aiohttp failures onto ``channels.errors``.

Codes from the developer docs' "JSON Error Codes" table. A failure before the request
left (connect refused, DNS, connect timeout) is a plain ``NetworkError``; one after it
may have reached Discord (dropped connection, read timeout, a 5xx) is ``MaybeSent``
(harmless for a message send: its nonce makes Discord return the first message).
"""

from __future__ import annotations

import aiohttp
import discord

from channels.discord.transport import ServerAnswer
from channels.errors import (
    ChannelError,
    MaybeSent,
    NetworkError,
    PermanentError,
    RateLimited,
    retry_after_header,
)

#: Failures a discord.py call can raise that ``map_error`` translates.
CALL_ERRORS = (
    discord.DiscordException, ServerAnswer, aiohttp.ClientError, OSError, TimeoutError,
)

_PERMANENT_REASONS: dict[int, str] = {
    10003: "unknown_channel",
    10008: "unknown_message",
    10013: "unknown_user",
    50001: "missing_access",
    50007: "cannot_dm_user",
    50013: "missing_permissions",
    50035: "invalid_form_body",
    50083: "thread_archived",
    160005: "thread_locked",
}
_STATUS_REASONS: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    413: "too_large",
}
#: Used when a 429 carries neither a body ``retry_after`` nor a ``Retry-After`` header.
DEFAULT_RETRY_AFTER = 5.0


def map_error(exc: BaseException) -> ChannelError:
    """The ``channels.errors`` equivalent of a failure raised by a discord.py call."""
    if isinstance(exc, ChannelError):
        return exc
    if isinstance(exc, ServerAnswer):
        if exc.status == 429:
            return RateLimited(exc.retry_after or DEFAULT_RETRY_AFTER)
        return MaybeSent(f"discord server error {exc.status}")
    if isinstance(exc, discord.RateLimited):
        # discord.py raises this when an exhausted bucket's reset is further away
        # than ``max_ratelimit_timeout``
        return RateLimited(exc.retry_after)
    if isinstance(exc, discord.HTTPException):
        status = exc.status
        if status == 429:
            # Not normally reached (transport.ServerAnswer comes first); kept so a
            # 429 can never be mistaken for a permanent failure.
            return RateLimited(retry_after_header(
                exc.response.headers if exc.response is not None else None,
                DEFAULT_RETRY_AFTER))
        if status >= 500:
            return MaybeSent(f"discord server error {status}")
        reason = _PERMANENT_REASONS.get(exc.code) or _STATUS_REASONS.get(status, f"http_{status}")
        detail = exc.text or getattr(exc.response, "reason", "") or ""
        return PermanentError(reason, f"{status} {detail}".strip())
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return NetworkError(f"discord unreachable: {type(exc).__name__}")
    if isinstance(exc, aiohttp.ClientError | OSError | TimeoutError):
        # the connection was up: the request may have been written and acted on
        return MaybeSent(f"discord connection failed mid-request: {type(exc).__name__}")
    if isinstance(exc, discord.ClientException):
        return NetworkError(f"discord client not ready: {exc}")
    return NetworkError(f"unexpected discord failure: {type(exc).__name__}")


def login_error(exc: BaseException, token_env: str) -> ChannelError:
    """``map_error`` for a failed login: a refused token names the variable it came from."""
    if isinstance(exc, discord.LoginFailure):
        return PermanentError("unauthorized", f"Discord rejected the token in {token_env}")
    return map_error(exc)

"""python-telegram-bot exceptions mapped onto ``channels.errors``.

Telegram's error texts are documented loosely; the matching here uses the stable
``description`` prefixes the Bot API returns (https://core.telegram.org/bots/api#making-requests).

A timeout or network error is ``MaybeSent`` unless httpx says the request never left
(connect error, connect or pool timeout: PTB chains the httpx exception as the cause).
The Bot API has no idempotency key and no way to look a sent message up, so the outbox
re-sends an ambiguous chunk (at least once rather than lost) and counts it.
"""

from __future__ import annotations

import warnings
from datetime import timedelta

import httpx
from telegram import error as tg

from channels.errors import (
    ChannelError,
    FormattingRejected,
    MaybeSent,
    NetworkError,
    PermanentError,
    RateLimited,
    TransientError,
)
from channels.redact import redact as scrub

_PERMANENT_BAD_REQUESTS = {
    "message is too long": "too_large",
    "chat not found": "chat_not_found",
    "message thread not found": "thread_not_found",
    "message text is empty": "empty_message",
    "not enough rights": "missing_permission",
    "have no rights": "missing_permission",
    "chat_write_forbidden": "missing_permission",
    "user not found": "user_not_found",
}

_FORBIDDEN = {
    "bot was blocked by the user": "blocked_by_user",
    "bot was kicked": "kicked",
    "bot is not a member": "not_a_member",
    "user is deactivated": "user_deactivated",
    "bot can't initiate conversation": "cannot_initiate",
}


def retry_after_seconds(error: tg.RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 deprecates the int form of retry_after
        warnings.simplefilter("ignore")
        value = error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


#: httpx failures raised before the request was written: a retry cannot duplicate
_NEVER_LEFT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _never_left(error: Exception) -> bool:
    return isinstance(error.__cause__, _NEVER_LEFT)


def _lookup(message: str, table: dict[str, str], default: str) -> str:
    lowered = message.lower()
    return next((reason for text, reason in table.items() if text in lowered), default)


def map_error(error: Exception, redact: tuple[str, ...] = ()) -> ChannelError:
    """The ``channels.errors`` equivalent of a python-telegram-bot exception.

    ``redact`` lists secrets scrubbed from the message (PTB wraps transport errors whose
    text could carry a URL, and URLs carry the token).
    """
    message = scrub(str(error), *redact)
    if isinstance(error, tg.RetryAfter):
        return RateLimited(retry_after_seconds(error), "telegram flood control")
    if isinstance(error, tg.Forbidden):
        return PermanentError(_lookup(message, _FORBIDDEN, "forbidden"), message)
    if isinstance(error, tg.InvalidToken):
        return PermanentError("invalid_token", "Telegram refused the bot token")
    if isinstance(error, tg.ChatMigrated):
        return PermanentError("chat_migrated", f"group moved to chat id {error.new_chat_id}")
    if isinstance(error, tg.BadRequest):
        if "can't parse entities" in message.lower() or "can't find end" in message.lower():
            return FormattingRejected(message)
        return PermanentError(_lookup(message, _PERMANENT_BAD_REQUESTS, "bad_request"), message)
    if isinstance(error, tg.TimedOut):
        if _never_left(error):
            return NetworkError(f"telegram timed out: {message}")
        return MaybeSent(f"telegram timed out after sending: {message}")
    if isinstance(error, tg.NetworkError):
        if _never_left(error):
            return NetworkError(f"telegram unreachable: {message}")
        return MaybeSent(f"telegram connection failed mid-request: {message}")
    if isinstance(error, tg.Conflict):
        return TransientError(f"telegram conflict: {message}")
    return PermanentError("telegram_error", f"{type(error).__name__}: {message}")

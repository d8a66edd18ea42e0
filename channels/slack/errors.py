"""Slack Web API failures mapped onto ``channels.errors``.

Slack answers most failures with HTTP 200 and ``{"ok": false, "error": "<code>"}``;
rate limits with HTTP 429 and a ``Retry-After`` header in seconds
(https://docs.slack.dev/apis/web-api/rate-limits). Messages carry the method and the
error code only, never a token or a request body.

A failure after the request may have reached Slack (a dropped connection, a read
timeout, a 5xx, ``internal_error``/``fatal_error``, which Slack says may have partly
succeeded) is ``MaybeSent``: the outbox looks the chunk up by its metadata before
posting it again.
"""

from __future__ import annotations

import asyncio

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from channels.errors import (
    ChannelError,
    FormattingRejected,
    MaybeSent,
    NetworkError,
    PermanentError,
    RateLimited,
    TransientError,
    retry_after_header,
)

__all__ = ["FORMATTING_ERRORS", "PERMANENT_ERRORS", "map_error"]

#: Codes a retry cannot fix: the bot lost access, the chat is gone, or the request is
#: wrong (chat.postMessage's documented errors).
PERMANENT_ERRORS = frozenset(
    {
        "not_in_channel",
        "channel_not_found",
        "is_archived",
        "account_inactive",
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "missing_scope",
        "no_permission",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "team_access_not_granted",
        "ekm_access_denied",
        "msg_too_long",
        "no_text",
        "too_many_attachments",
        "user_not_found",
        "users_not_found",
    }
)
#: Codes Slack returns for a malformed block payload: resend as plain text.
FORMATTING_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format"})
#: Slack-side trouble worth retrying.
_TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
#: ... of which these may have been acted on before they failed
_MAYBE_DONE_ERRORS = frozenset({"internal_error", "fatal_error"})


def _code(error: SlackApiError) -> str:
    try:
        code = error.response.get("error")
    except (AttributeError, TypeError):
        code = None
    return str(code) if code else "unknown_error"


def map_error(method: str, error: BaseException) -> ChannelError:
    """Translate one SDK/transport failure of ``method`` to the shared error tree."""
    if isinstance(error, ChannelError):
        return error
    if isinstance(error, SlackApiError):
        status = getattr(error.response, "status_code", 200)
        code = _code(error)
        if status == 429 or code in ("ratelimited", "rate_limited"):
            return RateLimited(retry_after_header(getattr(error.response, "headers", None), 1.0),
                               f"slack {method} rate limited")
        if code in FORMATTING_ERRORS:
            return FormattingRejected(f"slack {method}: {code}")
        if status >= 500 or code in _MAYBE_DONE_ERRORS:
            return MaybeSent(f"slack {method}: {code} (HTTP {status})")
        if code in _TRANSIENT_ERRORS:
            return TransientError(f"slack {method}: {code} (HTTP {status})")
        # Unknown codes are treated as permanent: retrying forever is the worse failure.
        return PermanentError(code, f"slack {method} failed")
    if isinstance(error, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return NetworkError(f"slack {method}: {type(error).__name__}")
    if isinstance(error, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        # connected: the request may have been written and acted on
        return MaybeSent(f"slack {method}: {type(error).__name__}")
    if isinstance(error, SlackClientError):
        return PermanentError("client_error", f"slack {method}: {type(error).__name__}")
    return PermanentError("unexpected_error", f"slack {method}: {type(error).__name__}")

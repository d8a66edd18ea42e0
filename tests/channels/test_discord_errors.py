"""``map_error`` on failures the fake cannot easily produce (pure mapping checks)."""

from __future__ import annotations

from typing import Any

import aiohttp
import discord
import pytest

from channels.discord.errors import map_error
from channels.discord.transport import ServerAnswer
from channels.errors import (
    MaybeSent,
    NetworkError,
    PermanentError,
    RateLimited,
    TransientError,
)


class _Response:
    """Just what ``discord.HTTPException`` reads from an aiohttp response."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.reason = "Reason"
        self.headers = headers or {}


def http_error(cls: type[discord.HTTPException], status: int, body: Any,
               headers: dict[str, str] | None = None) -> discord.HTTPException:
    return cls(_Response(status, headers), body)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cls", "status", "code", "reason"),
    [
        (discord.Forbidden, 403, 50007, "cannot_dm_user"),
        (discord.Forbidden, 403, 50013, "missing_permissions"),
        (discord.Forbidden, 403, 0, "forbidden"),
        (discord.NotFound, 404, 10003, "unknown_channel"),
        (discord.HTTPException, 401, 0, "unauthorized"),
        (discord.HTTPException, 400, 50035, "invalid_form_body"),
        (discord.HTTPException, 413, 40005, "too_large"),
    ],
)
def test_client_errors_are_permanent_with_a_reason(
    cls: type[discord.HTTPException], status: int, code: int, reason: str
) -> None:
    err = map_error(http_error(cls, status, {"message": "nope", "code": code}))
    assert isinstance(err, PermanentError)
    assert err.reason == reason
    assert "nope" in str(err)


def test_rate_limits_and_server_answers() -> None:
    assert isinstance(map_error(ServerAnswer(429, 3.5, False)), RateLimited)
    assert map_error(ServerAnswer(429, 3.5, True)).retry_after == 3.5  # type: ignore[attr-defined]
    server = map_error(ServerAnswer(502, None, False))
    assert isinstance(server, TransientError) and not isinstance(server, RateLimited)
    bucket = map_error(discord.RateLimited(45.0))
    assert isinstance(bucket, RateLimited) and bucket.retry_after == 45.0
    cf = map_error(http_error(discord.HTTPException, 429, "<html>", {"Retry-After": "9"}))
    assert isinstance(cf, RateLimited) and cf.retry_after == 9.0
    gone = map_error(http_error(discord.DiscordServerError, 503, {"message": "x", "code": 0}))
    assert isinstance(gone, TransientError)


@pytest.mark.parametrize(
    "exc",
    [aiohttp.ClientConnectionError("refused"), ConnectionResetError(104, "reset"),
     TimeoutError(), discord.ClientException("not logged in")],
)
def test_transport_failures_are_transient(exc: BaseException) -> None:
    assert isinstance(map_error(exc), TransientError)


@pytest.mark.parametrize(
    "exc",
    [aiohttp.ClientConnectorError(aiohttp.client_reqrep.ConnectionKey(
        "discord.com", 443, True, True, None, None, None), ConnectionRefusedError(111, "no")),
     aiohttp.ConnectionTimeoutError("connect timeout"),
     discord.ClientException("not logged in")],
)
def test_a_request_that_never_left_is_a_safe_network_error(exc: BaseException) -> None:
    err = map_error(exc)
    assert isinstance(err, NetworkError) and not isinstance(err, MaybeSent)


@pytest.mark.parametrize(
    "exc",
    [aiohttp.ServerDisconnectedError(), aiohttp.SocketTimeoutError("read timeout"),
     ConnectionResetError(104, "reset"), TimeoutError(), ServerAnswer(502, None, False),
     http_error(discord.DiscordServerError, 503, {"message": "x", "code": 0})],
)
def test_a_request_that_may_have_arrived_is_ambiguous(exc: BaseException) -> None:
    assert isinstance(map_error(exc), MaybeSent)

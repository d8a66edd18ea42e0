"""OAuth2 access tokens for XOAUTH2 (IMAP and SMTP), refreshed by the gateway.

The refresh token (long-lived, from the operator's one-time consent) is exchanged at
the provider's token endpoint (RFC 6749 section 6) for an access token that lives
about an hour; a new one is fetched ``refresh_margin`` seconds before it expires, so
a login never presents an expired token. A refused refresh (``invalid_grant``: the
user revoked access, or the token expired) is a ``PermanentError`` that tells the
operator what to do; secrets never appear in it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
from pydantic import SecretStr

from channels.errors import NetworkError, PermanentError

#: Google's documented default when a token answer carries no ``expires_in``
DEFAULT_LIFETIME = 3600.0


class TokenManager:
    """Gives a valid access token; refreshes it before expiry, once at a time."""

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: SecretStr,
        refresh_token: SecretStr,
        *,
        margin: float = 120.0,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = token_url
        self._client_id = client_id
        self._client_secret = client_secret
        self._refresh_token = refresh_token
        self._margin = margin
        self._timeout = timeout
        self._clock = clock
        self._access: SecretStr | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"TokenManager({self._url!r}, client_id={self._client_id!r})"

    async def token(self) -> str:
        async with self._lock:
            if self._access is None or self._clock() >= self._expires_at - self._margin:
                await self._refresh()
            assert self._access is not None
            return self._access.get_secret_value()

    async def _refresh(self) -> None:
        form = {
            "grant_type": "refresh_token",
            "client_id": self._client_id,
            "client_secret": self._client_secret.get_secret_value(),
            "refresh_token": self._refresh_token.get_secret_value(),
        }
        try:
            timeout = aiohttp.ClientTimeout(total=self._timeout)
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.post(self._url, data=form) as response,
            ):
                status = response.status
                try:
                    body = await response.json(content_type=None)
                except ValueError:
                    body = {}
        except (TimeoutError, aiohttp.ClientError) as err:
            raise NetworkError(
                f"oauth2: token endpoint unreachable: {type(err).__name__}"
            ) from None
        if not isinstance(body, dict):
            body = {}
        if status == 200 and isinstance(body.get("access_token"), str):
            lifetime = body.get("expires_in", DEFAULT_LIFETIME)
            self._access = SecretStr(body["access_token"])
            self._expires_at = self._clock() + float(lifetime)
            return
        error = str(body.get("error", f"HTTP {status}"))[:100]
        if error in ("invalid_grant", "invalid_client", "unauthorized_client"):
            raise PermanentError(
                "oauth_revoked",
                f"the token endpoint refused the refresh token ({error}): access was revoked "
                "or has expired; run the OAuth consent again and set the new refresh token",
            )
        if status >= 500 or status == 429:
            raise NetworkError(f"oauth2: token endpoint answered {error}")
        raise PermanentError("oauth_failed", f"oauth2 token refresh failed: {error}")

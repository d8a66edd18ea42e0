"""Hand Discord's 429s and 5xx answers to the outbox instead of discord.py's sleeps.

discord.py's ``HTTPClient.request`` sleeps out every 429 (body ``retry_after``) and
retries 500/502/504/524 up to five times with growing sleeps, all inside one call.
The gateway's outbox owns waiting and retrying (Redis-shared, per chat, idempotent per
chunk), so a send must fail fast with the server's answer. The documented
``Client(http_trace=...)`` knob gives an aiohttp ``TraceConfig``; its
``on_request_end`` sees each REST response before discord.py does and raises
``ServerAnswer`` for those statuses. discord.py's request loop only catches
``OSError``, so the exception leaves the call with the bucket released, and aiohttp
closes the response.

Kept from discord.py: its per-route buckets from the ``X-RateLimit-*`` headers of
successful answers, which make it wait *before* sending into an exhausted bucket
(so 429s stay rare), and raise ``discord.RateLimited`` when that wait would exceed
``max_ratelimit_timeout``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import aiohttp

#: Statuses discord.py would otherwise sleep and retry on its own.
SURFACED = frozenset({429, 500, 502, 504, 524})
#: When a 429 carries no usable wait at all (never seen from Discord itself).
DEFAULT_RETRY_AFTER = 5.0


class ServerAnswer(Exception):
    """Discord answered ``status``; ``retry_after`` (seconds) for a 429."""

    def __init__(self, status: int, retry_after: float | None, is_global: bool) -> None:
        scope = " (global)" if is_global else ""
        super().__init__(f"discord answered {status}{scope}")
        self.status = status
        self.retry_after = retry_after
        self.is_global = is_global


async def _retry_after(response: aiohttp.ClientResponse) -> tuple[float, bool]:
    """The wait Discord asked for: the JSON body's ``retry_after`` (float seconds,
    the precise one), else ``Retry-After`` / ``X-RateLimit-Reset-After`` headers."""
    try:
        body = json.loads(await response.read())
        if isinstance(body, dict) and body.get("retry_after") is not None:
            return float(body["retry_after"]), bool(body.get("global", False))
    except (ValueError, TypeError, RecursionError, aiohttp.ClientError):
        pass  # not JSON, or nested too deeply to parse: fall back to the headers
    for header in ("Retry-After", "X-RateLimit-Reset-After"):
        value = response.headers.get(header)
        if value is not None:
            try:
                return float(value), response.headers.get("X-RateLimit-Global") == "true"
            except ValueError:
                continue
    return DEFAULT_RETRY_AFTER, False


async def _on_request_end(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestEndParams,
) -> None:
    status = params.response.status
    if status not in SURFACED or params.headers.get("Upgrade", "").lower() == "websocket":
        return
    if status == 429:
        retry_after, is_global = await _retry_after(params.response)
        raise ServerAnswer(status, retry_after, is_global)
    raise ServerAnswer(status, None, False)


def surfacing_trace() -> aiohttp.TraceConfig:
    """A ``TraceConfig`` for ``discord.Client(http_trace=...)``."""
    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(_on_request_end)
    return trace

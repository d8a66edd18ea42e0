"""Download one file over HTTP with a byte cap, for adapters whose files are plain
URLs (Slack's ``url_private`` with the bot token, Discord's CDN).

The URL comes from a platform event, so it is fetched only from the hosts the adapter
names (its platform's file hosts and its configured API origin), redirects included:
a token never goes to a host the adapter did not name. A declared ``Content-Length``
over the cap stops before the body is read; else reading stops at the cap.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Collection, Mapping

import httpx

from channels.errors import (
    AttachmentTooLarge,
    NetworkError,
    PermanentError,
    RateLimited,
    TransientError,
    retry_after_header,
)

#: redirects followed (each to a named host)
MAX_REDIRECTS = 3
TIMEOUT = 60.0


def host_of(url: str | None) -> str | None:
    try:
        return httpx.URL(url).host or None if url else None
    except httpx.InvalidURL:
        return None


async def fetch_capped(url: str, max_bytes: int, *, hosts: Collection[str],
                       headers: Mapping[str, str] | None = None) -> bytes:
    """The body of ``url`` (at most ``max_bytes``); raises the channel error tree."""
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                if host_of(url) not in hosts:
                    raise PermanentError("file_host", f"file on {host_of(url)!r} not "
                                         "fetched: not a host of this platform")
                async with client.stream("GET", url, headers=dict(headers or {})) as resp:
                    if resp.is_redirect and "location" in resp.headers:
                        url = str(resp.url.join(resp.headers["location"]))
                        continue
                    _check(resp, max_bytes)
                    return await read_capped(resp.aiter_bytes(), max_bytes)
    except httpx.TransportError as exc:
        raise NetworkError(f"file download: {type(exc).__name__}") from None
    raise PermanentError("file_redirects", "file download: too many redirects")


async def read_capped(parts: AsyncIterable[bytes], max_bytes: int) -> bytes:
    """``parts`` joined; ``AttachmentTooLarge`` as soon as they pass ``max_bytes`` (the
    rest is not read)."""
    data = bytearray()
    async for part in parts:
        data += part
        AttachmentTooLarge.check(len(data), max_bytes)
    return bytes(data)


def _check(resp: httpx.Response, max_bytes: int) -> None:
    status = resp.status_code
    if status == 429:
        raise RateLimited(retry_after_header(resp.headers, 1.0), "file download rate limited")
    if status >= 500 or status == 408:
        raise TransientError(f"file download: HTTP {status}")
    if status >= 400:
        raise PermanentError(f"http_{status}", f"file download: HTTP {status}")
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise AttachmentTooLarge(max_bytes)

"""The HTTP Events API endpoint (aiohttp), mounted by the gateway's web app.

Order of checks (https://docs.slack.dev/authentication/verifying-requests-from-slack):
signature and timestamp first (401, nothing else runs), then JSON (400 + log line),
then ``url_verification`` (echo the challenge), then the event: 200 only after the
sink made it durable, 503 when it could not so Slack retries (Slack retries up to 3
times, and it wants an answer within 3 seconds).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from channels.slack.normalize import MalformedEvent

__all__ = ["TIMESTAMP_WINDOW_SECONDS", "EventsHandler", "signature_ok"]

log = logging.getLogger(__name__)

#: Slack: "verify that the request timestamp is within five minutes of local time".
TIMESTAMP_WINDOW_SECONDS = 60 * 5

Process = Callable[[dict[str, Any]], Awaitable[None]]


def signature_ok(verifier: SignatureVerifier, body: bytes, headers: Any) -> bool:
    """True when ``X-Slack-Signature`` is the HMAC-SHA256 of ``v0:<ts>:<body>`` under
    the signing secret (compared with ``hmac.compare_digest`` by the SDK) and
    ``X-Slack-Request-Timestamp`` is within the five-minute window."""
    timestamp = headers.get("X-Slack-Request-Timestamp")
    signature = headers.get("X-Slack-Signature")
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    try:
        return verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
    except (ValueError, UnicodeDecodeError):
        return False


class EventsHandler:
    """aiohttp handler for Slack's Events API POSTs."""

    def __init__(self, verifier: SignatureVerifier, process: Process, account: str) -> None:
        self._verifier = verifier
        self._process = process
        self._account = account

    def __repr__(self) -> str:
        return f"EventsHandler(account={self._account!r})"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if not signature_ok(self._verifier, body, request.headers):
            log.warning(
                "slack[%s]: rejected a request with a bad signature or stale timestamp (401)",
                self._account,
            )
            return web.Response(status=401, text="invalid signature")
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("slack[%s]: malformed JSON body (400): %s", self._account, exc)
            return web.Response(status=400, text="malformed JSON")
        if not isinstance(payload, dict):
            log.warning("slack[%s]: JSON body is not an object (400)", self._account)
            return web.Response(status=400, text="malformed payload")
        if payload.get("type") == "url_verification":
            challenge = payload.get("challenge")
            if not isinstance(challenge, str):
                log.warning("slack[%s]: url_verification without a challenge (400)", self._account)
                return web.Response(status=400, text="missing challenge")
            return web.json_response({"challenge": challenge})
        try:
            await self._process(payload)
        except MalformedEvent as exc:
            log.warning("slack[%s]: malformed event (400): %s", self._account, exc)
            return web.Response(status=400, text="malformed event")
        except Exception as exc:
            # Not durable: answer 5xx so Slack redelivers; dedupe makes that safe.
            log.error(
                "slack[%s]: event %s not made durable, answering 503 for a retry: %s",
                self._account,
                payload.get("event_id"),
                type(exc).__name__,
            )
            return web.Response(status=503, text="retry later")
        return web.Response(status=200)

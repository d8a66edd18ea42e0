"""The Cloud API webhook endpoint (aiohttp), mounted by the gateway's web app.

``GET``: the subscription handshake. Meta calls the callback URL with
``hub.mode=subscribe``, ``hub.verify_token`` and ``hub.challenge``; the endpoint echoes
the challenge only when the token is the configured one (compared in constant time),
else 403 (Graph API webhooks, "Verification Requests").

``POST``: one delivery. Order of checks: ``X-Hub-Signature-256`` (``sha256=`` + the
HMAC-SHA256 of the raw body under the app secret, compared in constant time by
``pywa.utils.webhook_updates_validator``): missing or forged -> 401 and nothing else
runs. Then JSON (not JSON, not an object, nested deeper than any real delivery, or
not shaped like one -> 400). Then freshness: when every event in a correctly signed
body is older than ``max_event_age`` (Meta stops retrying after 7 days) it is a
replay -> 401. Then the messages go to the sink: 200 only once they are durable, 503
when they could not be made durable, so Meta delivers again (dedupe makes that safe).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pywa.utils import webhook_updates_validator

from channels.whatsapp.normalize import MalformedPayload, Parsed

__all__ = ["MAX_DEPTH", "WebhookHandler", "json_depth"]

log = logging.getLogger(__name__)

#: A real delivery nests about 8 levels (entry > changes > value > messages > context);
#: anything far deeper is hostile or broken, refused before it is walked.
MAX_DEPTH = 32
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")

Parse = Callable[[dict[str, Any]], Parsed]
Process = Callable[[Parsed], Awaitable[None]]


def json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON, walked iteratively (no recursion to exhaust)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                return deepest
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return deepest


class WebhookHandler:
    """aiohttp handlers for one phone number's webhook route."""

    def __init__(
        self,
        *,
        account: str,
        app_secret: str,
        verify_token: str,
        max_event_age: int,
        parse: Parse,
        process: Process,
    ) -> None:
        self._account = account
        self._app_secret = app_secret
        self._verify_token = verify_token.encode()
        self._max_age = max_event_age
        self._parse = parse
        self._process = process
        self.rejected: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"WebhookHandler(account={self._account!r})"

    def _reject(self, status: int, why: str, log_line: str) -> web.Response:
        self.rejected[why] = self.rejected.get(why, 0) + 1
        log.warning("whatsapp[%s]: %s (%d)", self._account, log_line, status)
        return web.Response(status=status, text=why)

    async def verify(self, request: web.Request) -> web.Response:
        """The subscription handshake: echo ``hub.challenge`` for the right token only."""
        query = request.query
        token = query.get("hub.verify_token", "").encode("utf-8", "surrogateescape")
        challenge = query.get("hub.challenge", "")
        if (
            query.get("hub.mode") == "subscribe"
            and challenge
            and hmac.compare_digest(token, self._verify_token)
        ):
            log.info("whatsapp[%s]: webhook subscription verified", self._account)
            return web.Response(text=challenge)
        return self._reject(403, "verification failed", "refused a webhook handshake")

    def _signed(self, body: bytes, header: str | None) -> bool:
        # the format check keeps non-ASCII out of compare_digest (it raises on it)
        if not header or not _SIGNATURE.fullmatch(header):
            return False
        return webhook_updates_validator(self._app_secret, body, header)

    async def deliver(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self._signed(body, request.headers.get("X-Hub-Signature-256")):
            return self._reject(401, "invalid signature",
                                "rejected a delivery with a missing or bad signature")
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return self._reject(400, "malformed JSON", "delivery body is not JSON")
        if not isinstance(payload, dict) or json_depth(payload) > MAX_DEPTH:
            return self._reject(400, "malformed payload",
                                "delivery body is not a JSON object of sane depth")
        try:
            parsed = self._parse(payload)
        except MalformedPayload as exc:
            return self._reject(400, "malformed payload", f"malformed delivery: {exc}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # a shape the normalizer did not foresee: still the sender's fault, not a 500
            return self._reject(400, "malformed payload",
                                f"malformed delivery ({type(exc).__name__})")
        newest = max(parsed.timestamps, default=None)
        if newest is not None and newest < time.time() - self._max_age:
            return self._reject(401, "stale delivery",
                                f"rejected a replayed delivery (newest event at {newest})")
        try:
            await self._process(parsed)
        except Exception as exc:
            # Not durable: a non-200 makes Meta deliver again; dedupe makes that safe.
            log.error("whatsapp[%s]: delivery not made durable, answering 503 for a retry: %s",
                      self._account, type(exc).__name__)
            return web.Response(status=503, text="retry later")
        return web.Response(text="ok")

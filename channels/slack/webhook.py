"""The HTTP Events API endpoint: Bolt's aiohttp adapter, mounted on the gateway's web app.

Order (https://docs.slack.dev/authentication/verifying-requests-from-slack): aiohttp
reads the body under the app's ``client_max_size`` (413 past it, before any parsing);
Bolt parses it and checks the signature and the five-minute timestamp window (401,
nothing else runs); Bolt echoes ``url_verification``; a malformed event gets 400; an
event gets 200 only after the sink made it durable, 503 when it could not, so Slack
retries (up to 3 times; it wants an answer within 3 seconds).

Two holes in Bolt's HTTP path are closed here; ``tests/channels/test_slack_bolt.py``
shows Bolt's own answer for each, so the workaround can go when Bolt changes:

* Bolt parses the body (``AsyncBoltRequest.__init__``) before its verification
  middleware runs, and that parse raises on bodies no signature check has vetted: a
  deeply nested JSON array (``RecursionError``), JSON that is not an object
  (``AttributeError``), invalid UTF-8. Such a body gets 401 unless it is validly
  signed, then 400. The check uses slack_sdk's ``SignatureVerifier``, the class Bolt's
  verification middleware wraps, because no Bolt request object can be built for it
  (that verifier signs text, so invalid UTF-8 always gets 401).
* Bolt's verifier calls ``int()`` on ``X-Slack-Request-Timestamp`` unguarded, so a
  non-numeric value escapes as a 500. No authentic request carries one: 401 here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.signature import SignatureVerifier

__all__ = ["EventsHandler", "signature_ok"]

log = logging.getLogger(__name__)

#: What Bolt's request parsing raises on a body it cannot turn into a payload dict.
_UNPARSEABLE = (ValueError, TypeError, AttributeError, RecursionError)


def _timestamp(headers: Mapping[str, str]) -> str | None:
    value = headers.get("X-Slack-Request-Timestamp", "")
    return value if value.isascii() and value.isdigit() else None


def signature_ok(verifier: SignatureVerifier, body: bytes, headers: Mapping[str, str]) -> bool:
    """True when ``X-Slack-Signature`` is the HMAC-SHA256 of ``v0:<ts>:<body>`` under the
    signing secret (``hmac.compare_digest`` in the SDK) and the timestamp is in the window.
    Used only for bodies Bolt cannot parse (see the module doc)."""
    timestamp = _timestamp(headers)
    signature = headers.get("X-Slack-Signature")
    if timestamp is None or not signature:
        return False
    try:
        return verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
    except UnicodeDecodeError:
        # The SDK signs the body as UTF-8 text; Slack never sends anything else.
        return False


class EventsHandler:
    """aiohttp handler for Slack's Events API POSTs, dispatching into the Bolt app."""

    def __init__(self, app: AsyncApp, verifier: SignatureVerifier, account: str) -> None:
        self._app = app
        self._verifier = verifier
        self._account = account

    def __repr__(self) -> str:
        return f"EventsHandler(account={self._account!r})"

    def _unauthorized(self) -> web.Response:
        log.warning(
            "slack[%s]: rejected a request with a bad signature or stale timestamp (401)",
            self._account,
        )
        return web.Response(status=401, text="invalid signature")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        # Raises HTTPRequestEntityTooLarge (413) past client_max_size, before any parsing.
        body = await request.read()
        if _timestamp(request.headers) is None:
            return self._unauthorized()
        try:
            bolt_request = await to_bolt_request(request)
        except _UNPARSEABLE as exc:
            if not signature_ok(self._verifier, body, request.headers):
                return self._unauthorized()
            log.warning("slack[%s]: malformed JSON body (400): %s", self._account,
                        type(exc).__name__)
            return web.Response(status=400, text="malformed JSON")
        try:
            bolt_response = await self._app.async_dispatch(bolt_request)
        except Exception as exc:
            # Bolt answers listener and middleware errors itself; this is a failure in
            # its error path. Not durable: 503 so Slack redelivers.
            log.error("slack[%s]: event dispatch failed, answering 503: %s", self._account,
                      type(exc).__name__)
            return web.Response(status=503, text="retry later")
        if bolt_response.status == 401:
            return self._unauthorized()
        return await to_aiohttp_response(bolt_response)

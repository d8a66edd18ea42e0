"""The Bolt ``AsyncApp`` both receive modes dispatch into.

``process_before_response=True`` is what makes Bolt fit this bot: the listener runs to
completion *before* Bolt builds the acknowledgement, so the answer (HTTP status, or the
Socket Mode ack) reflects whether the message became durable
(``slack_bolt.listener.asyncio_runner.AsyncioListenerRunner.run``: the automatic
``ack()`` follows the listener; an exception turns the response into a 500, which the
Socket Mode adapter does not ack and the error handler below turns into 503 over HTTP).

What is ours, and why:

* ``authorize`` answers from the ``auth.test`` the channel already made at start. Bolt's
  single-team authorization would call ``auth.test`` again on the first event and, on a
  ``SlackApiError`` there (a 429, say), answer 200 with an error text: an ack for a
  message that never reached the sink.
* ``Triage`` (Bolt's ``before_authorize`` slot, after its signature check) answers what
  no listener should see: an ``event_callback`` without an event object is malformed
  (400 over HTTP; acked and logged in Socket Mode, since a redelivery cannot fix it),
  so is a ``url_verification`` without a challenge (400); slash commands go to the
  command listener; other payload types (interactivity, ``app_rate_limited``: not
  used by this bot) are acked and ignored instead of Bolt's 404, so Slack does not
  redeliver them.
* the command listener hands a slash command payload to ``command`` and acks it (with
  an empty body: the answer comes through the outbox, like every reply) once the
  command is durable; a sink failure is not acked (Slack shows the user an error).
* the error handler maps the listener's outcome onto answers (see ``_answer``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.logger.messages import (
    warning_client_prioritized_and_token_skipped,
    warning_token_skipped,
)
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.slack.normalize import MalformedEvent

__all__ = ["Authorize", "Process", "build_app"]

log = logging.getLogger("channels.slack")

Process = Callable[[dict[str, Any]], Awaitable[None]]
#: Returns the start-time auth.test as Bolt's ``AuthorizeResult``; raises before start.
Authorize = Callable[[], AuthorizeResult]

#: Payload types Bolt's own middleware answers (URL verification, SSL check).
_BOLT_HANDLED = frozenset({"url_verification", "ssl_check"})


class _TokenNotices(logging.Filter):
    """Drops Bolt's start-up notices that a token is unused. ``AsyncApp`` reads
    ``SLACK_BOT_TOKEN`` from the environment whatever it is given, and warns that the
    ``authorize`` function wins; here that is the design, not an operator mistake."""

    _NOTICES = frozenset({warning_client_prioritized_and_token_skipped(),
                          warning_token_skipped()})

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self._NOTICES


_bolt_log = logging.getLogger("channels.slack.bolt")
_bolt_log.addFilter(_TokenNotices())


def _is_socket(request: AsyncBoltRequest) -> bool:
    return request.mode == "socket_mode"


class Triage(AsyncMiddleware):
    """Lets well-formed events (and Bolt's own payload types) through to the listener."""

    def __init__(self, account: str) -> None:
        self._account = account

    async def async_process(
        self,
        *,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse]],  # Bolt passes it by this name
    ) -> BoltResponse:
        kind = req.body.get("type")
        if kind == "url_verification" and not isinstance(req.body.get("challenge"), str):
            # Bolt would echo {"challenge": null}; Slack's handshake always sends one.
            log.warning("slack[%s]: url_verification without a challenge (400)", self._account)
            return BoltResponse(status=400, body="missing challenge")
        if kind in _BOLT_HANDLED:
            return await next()
        if kind is None and isinstance(req.body.get("command"), str):
            return await next()  # a slash command payload has no "type"
        if kind != "event_callback":
            log.info("slack[%s]: ignoring payload type %r", self._account, kind)
            return BoltResponse(status=200, body="")
        event = req.body.get("event")
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            return await next()
        raise MalformedEvent("event_callback without an event object")  # answered by _answer


def build_app(
    *,
    web: AsyncWebClient,
    process: Process,
    command: Process,
    authorize: Authorize,
    account: str,
    signing_secret: str | None,
) -> AsyncApp:
    """An ``AsyncApp`` that hands every Events API payload to ``process`` before it is
    acknowledged. ``signing_secret`` None (Socket Mode) turns request verification off:
    Socket Mode requests carry no signature, the websocket itself is authenticated."""

    async def _authorize() -> AuthorizeResult:
        return authorize()

    app = AsyncApp(
        name=f"pynanoclaw-slack-{account}",
        logger=_bolt_log,
        process_before_response=True,
        # Bolt's per-request clients are never used for sending (the channel's client
        # is); tokenless, since ``authorize`` supplies the token.
        client=AsyncWebClient(base_url=web.base_url, timeout=web.timeout, retry_handlers=[]),
        # Passed explicitly (not None) so Bolt never falls back to SLACK_SIGNING_SECRET.
        signing_secret=signing_secret or "",
        request_verification_enabled=signing_secret is not None,
        authorize=_authorize,
        before_authorize=Triage(account),
        # The listener never uses say()/set_status(); skip building them per event.
        attaching_conversation_kwargs_enabled=False,
    )

    async def on_event(body: dict[str, Any]) -> None:
        # Returns once the message is durable (or deliberately skipped); Bolt acks after.
        await process(body)

    async def on_command(body: dict[str, Any], ack: AsyncAck) -> None:
        await command(body)  # raises if not durable: no ack, Bolt answers an error
        await ack()

    async def on_error(error: Exception, request: AsyncBoltRequest) -> BoltResponse:
        return _answer(error, request, account)

    # One listener for every event type; the normalization table decides what counts.
    app.event(re.compile(".*"))(on_event)
    app.command(re.compile(".*"))(on_command)
    app.error(on_error)
    return app


def _answer(error: Exception, request: AsyncBoltRequest, account: str) -> BoltResponse:
    """The answer for a listener (or middleware) failure.

    ``MalformedEvent``: 400 over HTTP; acked in Socket Mode (a redelivery of a broken
    payload cannot succeed). Anything else means not durable: 503 over HTTP so Slack
    retries, a non-200 in Socket Mode so no ack is sent and Slack redelivers. Dedupe by
    event id makes either retry safe. Only the exception type is logged: an SDK error's
    text can carry request details.
    """
    event_id = request.body.get("event_id") if isinstance(request.body, dict) else None
    if isinstance(error, MalformedEvent):
        if _is_socket(request):
            log.warning("slack[%s]: malformed event %s, acked and skipped: %s",
                        account, event_id, error)
            return BoltResponse(status=200, body="")
        log.warning("slack[%s]: malformed event (400): %s", account, error)
        return BoltResponse(status=400, body="malformed event")
    if _is_socket(request):
        log.error("slack[%s]: event %s not made durable, not acked: %s",
                  account, event_id, type(error).__name__)
        return BoltResponse(status=500, body="")
    log.error("slack[%s]: event %s not made durable, answering 503 for a retry: %s",
              account, event_id, type(error).__name__)
    return BoltResponse(status=503, body="retry later")

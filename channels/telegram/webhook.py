"""The webhook endpoint Telegram posts updates to.

Answers: 401 without the right ``X-Telegram-Bot-Api-Secret-Token`` (compared in
constant time; the sink is never reached), 400 for a body that is not an Update (logged),
503 when the sink could not make the message durable (Telegram retries), 200 otherwise,
including for updates dropped on purpose.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable

from aiohttp import web
from pydantic import SecretStr
from telegram import Bot, Update

from channels.base import InboundSink
from channels.telegram.normalize import BotIdentity, normalize_update

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 (a header name)


class WebhookEndpoint:
    """aiohttp handler for one bot; inert (503) until the channel started."""

    def __init__(
        self,
        secret: SecretStr,
        bot: Callable[[], Bot],
        account: str = "default",
    ) -> None:
        self._secret = secret
        self._bot = bot
        self._account = account
        self.sink: InboundSink | None = None
        self.identity: BotIdentity | None = None

    def __repr__(self) -> str:
        return f"WebhookEndpoint(account={self._account!r})"

    def _authorized(self, request: web.Request) -> bool:
        given = request.headers.get(SECRET_HEADER, "").encode()
        return hmac.compare_digest(given, self._secret.get_secret_value().encode())

    async def handle(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            log.warning(
                "telegram webhook: request without the right secret token from %s", request.remote
            )
            return web.Response(status=401, text="unauthorized")
        if self.sink is None or self.identity is None:
            return web.Response(status=503, text="not started")
        body = await request.read()
        try:
            data = json.loads(body)
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("not a Telegram Update")
            update = Update.de_json(data, self._bot())
        except Exception as error:
            log.warning(
                "telegram webhook: malformed update (%s, %d bytes) rejected",
                type(error).__name__,
                len(body),
            )
            return web.Response(status=400, text="malformed update")
        try:
            inbound = normalize_update(update, self.identity, self._account)
        except Exception:
            log.exception(
                "telegram webhook: update %s could not be normalized; skipped", update.update_id
            )
            return web.Response(status=200)
        if inbound is not None:
            try:
                await self.sink(inbound)
            except Exception as error:
                log.warning(
                    "telegram webhook: inbox unavailable (%s); answering 503 so Telegram retries",
                    type(error).__name__,
                )
                return web.Response(status=503, text="try again")
        return web.Response(status=200)

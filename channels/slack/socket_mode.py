"""Socket Mode receiving with Bolt's ``AsyncSocketModeHandler`` (aiohttp client).

The handler feeds each envelope to the Bolt app and acks only when the app's answer is
a 200 (``slack_bolt.adapter.socket_mode.async_internals.send_async_response``). With
``process_before_response=True`` that answer exists only after the listener returned,
and is a 500 when it raised: then no ack is sent and Slack redelivers the envelope
(``retry_attempt`` grows; Bolt passes it on as ``X-Slack-Retry-Num``).

The SDK client under the handler owns the connection loop: it fetches a websocket URL
with apps.connections.open, pings every ``ping_interval`` seconds, treats four missed
pongs as a stale socket (the liveness watchdog), honours Slack's ``disconnect`` messages
and reconnects.
"""

from __future__ import annotations

import logging

from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from channels.slack.errors import map_error

__all__ = ["SocketReceiver"]


class SocketReceiver:
    """One Socket Mode connection dispatching into ``app``."""

    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        web: AsyncWebClient,
        *,
        account: str,
        ping_interval: float,
    ) -> None:
        self._app = app
        self._app_token = app_token
        self._web = web
        self._account = account
        self._ping_interval = ping_interval
        self._handler: AsyncSocketModeHandler | None = None

    def __repr__(self) -> str:
        return f"SocketReceiver(account={self._account!r})"

    async def start(self) -> None:
        """Connect; returns once the websocket is open. Raises PermanentError when the
        app token is refused, NetworkError when Slack cannot be reached."""
        handler = AsyncSocketModeHandler(
            self._app,
            self._app_token,
            logger=logging.getLogger("channels.slack.sdk"),
            web_client=self._web,
            ping_interval=self._ping_interval,
        )
        client = handler.client
        try:
            # Fetched here, not inside connect(), so a refused token fails start()
            # instead of being retried forever by the SDK's connect loop.
            client.wss_uri = await client.issue_new_wss_url()
        except Exception as exc:
            await handler.close_async()  # type: ignore[no-untyped-call]
            raise map_error("apps.connections.open", exc) from None
        await handler.connect_async()  # type: ignore[no-untyped-call]
        self._handler = handler

    async def stop(self) -> None:
        handler, self._handler = self._handler, None
        if handler is not None:
            await handler.close_async()  # type: ignore[no-untyped-call]

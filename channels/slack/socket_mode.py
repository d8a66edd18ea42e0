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

__all__ = ["connect"]


async def connect(app: AsyncApp, app_token: str, web: AsyncWebClient, *,
                  ping_interval: float) -> AsyncSocketModeHandler:
    """One Socket Mode connection dispatching into ``app``, open when this returns (close
    it with ``close_async``). Raises PermanentError when the app token is refused,
    NetworkError when Slack cannot be reached."""
    handler = AsyncSocketModeHandler(
        app,
        app_token,
        logger=logging.getLogger("channels.slack.sdk"),
        web_client=web,
        ping_interval=ping_interval,
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
    return handler

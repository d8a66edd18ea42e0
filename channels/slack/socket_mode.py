"""Socket Mode receiving with the SDK's aiohttp client.

The SDK client owns the connection loop: it fetches a websocket URL with
apps.connections.open, pings every ``ping_interval`` seconds, treats four missed pongs
as a stale socket (the liveness watchdog), honours Slack's ``disconnect`` messages and
reconnects. Here we only decide when to ack: after the sink returned.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.slack.errors import map_error
from channels.slack.normalize import MalformedEvent

__all__ = ["SocketReceiver"]

log = logging.getLogger(__name__)

Process = Callable[[dict[str, Any]], Awaitable[None]]


class SocketReceiver:
    """One Socket Mode connection feeding ``process`` with Events API payloads."""

    def __init__(
        self,
        app_token: str,
        web: AsyncWebClient,
        process: Process,
        *,
        account: str,
        ping_interval: float,
    ) -> None:
        self._app_token = app_token
        self._web = web
        self._process = process
        self._account = account
        self._ping_interval = ping_interval
        self._client: SocketModeClient | None = None

    def __repr__(self) -> str:
        return f"SocketReceiver(account={self._account!r})"

    async def start(self) -> None:
        """Connect; returns once the websocket is open. Raises PermanentError when the
        app token is refused, NetworkError when Slack cannot be reached."""
        client = SocketModeClient(
            app_token=self._app_token,
            web_client=self._web,
            logger=logging.getLogger("channels.slack.sdk"),
            ping_interval=self._ping_interval,
        )
        client.socket_mode_request_listeners.append(self._on_request)
        try:
            # Fetched here, not inside connect(), so a refused token fails start()
            # instead of being retried forever by the SDK's connect loop.
            client.wss_uri = await client.issue_new_wss_url()
        except Exception as exc:
            await client.close()  # type: ignore[no-untyped-call]
            raise map_error("apps.connections.open", exc) from None
        await client.connect()  # type: ignore[no-untyped-call]
        self._client = client

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]

    async def _on_request(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        if req.type == "events_api":
            try:
                await self._process(req.payload)
            except MalformedEvent as exc:
                # Acked below: a redelivery of a broken payload cannot succeed.
                log.warning("slack[%s]: malformed event in envelope %s, skipped: %s",
                            self._account, req.envelope_id, exc)
            except Exception as exc:
                # No ack: Slack redelivers the envelope (retry_attempt grows).
                log.error(
                    "slack[%s]: envelope %s not made durable, not acked: %s",
                    self._account,
                    req.envelope_id,
                    type(exc).__name__,
                )
                return
        # Other envelope types (slash commands, interactivity) are not used by this bot;
        # acking them stops Slack from redelivering.
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

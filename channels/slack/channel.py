"""``SlackChannel``: Slack events in, ``Inbound`` out; ``Outbound`` in, chat.postMessage out.

Receiving runs on a slack-bolt ``AsyncApp`` with ``process_before_response=True``
(``channels.slack.bolt_app``): Bolt verifies the request, runs the listener (this
channel's ``_process``: normalize, hand to the sink) and only then acknowledges, over
HTTP (``webhook``) and in Socket Mode (``socket_mode``). Sending uses slack_sdk's
``AsyncWebClient``, the client Bolt itself wraps.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any, Self

from aiohttp import web
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

import channels.slack.socket_mode as socket_mode
from channels.base import NO_CONTEXT, Channel, ChannelContext, ChannelLimits, Chunk, InboundSink
from channels.download import fetch_capped, host_of
from channels.errors import FormattingRejected, PermanentError, mapped
from channels.models import Attachment, Inbound, Outbound
from channels.recent import Recent
from channels.slack.bolt_app import build_app
from channels.slack.errors import map_error
from channels.slack.mrkdwn import escape
from channels.slack.names import NameCache
from channels.slack.normalize import (
    MalformedEvent,
    SlackContext,
    event_rule,
    message_of,
    profile_name,
    sender_of,
    slash_to_inbound,
    to_inbound,
)
from channels.slack.render import SLACK_SECTION_LIMIT, render_chunks
from channels.slack.sent import chunk_metadata, find_posted
from channels.slack.settings import SlackSecrets, SlackSettings, load_secrets
from channels.slack.webhook import EventsHandler

__all__ = ["SlackChannel"]

log = logging.getLogger(__name__)

#: Slack allows about one message per second per channel, with short bursts
#: (https://docs.slack.dev/apis/web-api/rate-limits, "Posting messages").
SLACK_LIMITS = ChannelLimits(max_message_len=SLACK_SECTION_LIMIT, per_chat_interval=1.0, burst=1)


class SlackChannel(Channel):
    """A Slack app (bot user) in one workspace, over Socket Mode or the HTTP Events API.

    Typing: Slack's Web API has no typing indicator for bots (the RTM ``typing``
    message is not available to modern apps; ``assistant.threads.setStatus`` works
    only inside AI-assistant threads), so ``typing`` does nothing.
    """

    name = "slack"
    limits = SLACK_LIMITS

    def __init__(
        self,
        settings: SlackSettings,
        secrets: SlackSecrets,
        *,
        account: str = "default",
    ) -> None:
        self.settings = settings
        self.account = account
        self._secrets = secrets
        self._web = AsyncWebClient(
            token=secrets.bot_token.get_secret_value(),
            base_url=settings.api_base_url,
            timeout=settings.request_timeout,
            # The gateway outbox owns retries; the SDK must not retry behind its back.
            retry_handlers=[],
        )
        self._names = NameCache(self._web)
        #: recently handled event ids and channel+ts keys: the gateway inbox is the
        #: durable dedupe; this only spares it the obvious redeliveries
        self._seen: Recent[str, None] = Recent(4096)
        self._sink: InboundSink | None = None
        self._bot_user_id = settings.bot_user_id
        self._bot_name: str | None = None
        #: ids from auth.test (no token), for Bolt's authorize
        self._identity: dict[str, Any] | None = None
        self._socket: AsyncSocketModeHandler | None = None
        signing_secret = secrets.signing_secret if settings.mode == "http" else None
        self._app = build_app(
            web=self._web,
            process=self._process,
            command=self._command,
            authorize=self._authorize,
            account=account,
            signing_secret=signing_secret.get_secret_value() if signing_secret else None,
        )

    def __repr__(self) -> str:
        return f"SlackChannel(account={self.account!r}, mode={self.settings.mode!r})"

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        settings = SlackSettings.model_validate(block)
        return cls(settings, load_secrets(settings, env), account=account)

    @property
    def webhook_path(self) -> str:
        return self.settings.webhook_path or (
            "/slack/events" if self.account == "default" else f"/slack/{self.account}/events")

    @property
    def bot_user_id(self) -> str | None:
        return self._bot_user_id

    # -- life cycle -------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Learn the bot's identity (auth.test), then receive: connect Socket Mode, or
        arm the Events API route. Raises PermanentError on a refused token."""
        await self._identify()
        self._sink = sink
        if self.settings.mode == "socket":
            app_token = self._secrets.app_token
            if app_token is None:
                raise ValueError(f"set {self.settings.app_token_env}: Socket Mode needs it")
            try:
                self._socket = await socket_mode.connect(
                    self._app, app_token.get_secret_value(), self._web,
                    ping_interval=self.settings.ping_interval,
                )
            except BaseException:
                self._sink = None
                raise
        log.info("slack[%s]: started in %s mode as %s", self.account, self.settings.mode,
                 self._bot_user_id)

    async def stop(self) -> None:
        socket, self._socket = self._socket, None
        self._sink = None
        if socket is not None:
            await socket.close_async()  # type: ignore[no-untyped-call]

    async def check(self) -> str | None:
        """auth.test: does Slack accept the bot token? (``pynanoclaw status``)"""
        await self._identify()
        return f"@{self._bot_name}" if self._bot_name else self._bot_user_id

    async def _identify(self) -> None:
        with mapped(Exception, partial(map_error, "auth.test")):
            response = await self._web.auth_test()
        user_id = response.get("user_id")
        if self._bot_user_id is None:
            if not isinstance(user_id, str) or not user_id:
                raise map_error("auth.test", ValueError("no user_id"))
            self._bot_user_id = user_id
        bot_name = response.get("user")
        self._bot_name = bot_name if isinstance(bot_name, str) else None
        self._identity = {k: response.get(k) for k in ("enterprise_id", "team_id", "bot_id")}

    def _authorize(self) -> AuthorizeResult:
        """Bolt's authorization for every event, from the start-time auth.test (see
        bolt_app). Built per call, not stored: the result carries the bot token."""
        identity = self._identity
        if identity is None or self._sink is None:
            raise RuntimeError("slack channel not started")
        return AuthorizeResult(
            enterprise_id=identity["enterprise_id"],
            team_id=identity["team_id"],
            bot_id=identity["bot_id"],
            bot_user_id=self._bot_user_id,
            bot_token=self._secrets.bot_token.get_secret_value(),
        )

    # -- inbound ----------------------------------------------------------------

    def web_routes(self) -> list[web.RouteDef]:
        if self.settings.mode != "http":
            return []
        secret = self._secrets.signing_secret
        if secret is None:
            raise ValueError(f"set {self.settings.signing_secret_env}: HTTP mode needs it")
        handler = EventsHandler(
            self._app, SignatureVerifier(secret.get_secret_value()), self.account
        )
        return [web.post(self.webhook_path, handler.handle)]

    async def _process(self, payload: dict[str, Any]) -> None:
        """Bolt's listener for one Events API payload (HTTP body or Socket Mode envelope
        payload). Returns once the message is durable or deliberately skipped; raises
        when the sink raised (Bolt then answers 503 / sends no ack)."""
        sink = self._sink
        if sink is None:
            raise RuntimeError("slack channel not started")
        # bolt_app.Triage lets only event_callbacks with an event object get here.
        event = payload.get("event")
        if not isinstance(event, dict):
            raise MalformedEvent("event_callback without an event object")
        event_id = payload.get("event_id")
        if isinstance(event_id, str) and event_id in self._seen:
            return
        inbound = await self.normalize(event)
        if inbound is not None:
            key = f"{inbound.chat_id}:{inbound.message_id}"
            if key not in self._seen:
                await sink(inbound)
                self._seen[key] = None
        if isinstance(event_id, str):
            self._seen[event_id] = None

    async def _command(self, body: dict[str, Any]) -> None:
        """Bolt's listener for a slash command: durable in the sink before the ack."""
        sink = self._sink
        if sink is None:
            raise RuntimeError("slack channel not started")
        user = body.get("user_id")
        name = await self._names.lookup(user) if isinstance(user, str) and user else ""
        ctx = SlackContext(self.name, self.account, self._bot_user_id or "", self._bot_name)
        await sink(slash_to_inbound(body, ctx, name))

    async def normalize(self, event: dict[str, Any]) -> Inbound | None:
        """The Inbound for one Slack event, resolving the sender's name; None when the
        normalization table ignores the event (logged at debug with the reason).
        Raises ``MalformedEvent`` for a message event missing its channel, user or ts."""
        bot_user_id = self._bot_user_id or ""
        rule = event_rule(event, bot_user_id)
        if rule.malformed:
            raise MalformedEvent(f"{event.get('type')} event {rule.why}")
        if not rule.handle:
            log.debug("slack[%s]: skipped event: %s", self.account, rule.why)
            return None
        user = sender_of(event)
        name = profile_name(message_of(event))
        if name is not None:
            self._names.remember(user, name)
        else:
            name = await self._names.lookup(user) if user else ""
        ctx = SlackContext(self.name, self.account, bot_user_id, self._bot_name)
        return to_inbound(event, ctx, name)

    # -- outbound ---------------------------------------------------------------

    def render(self, text: str) -> list[Chunk]:
        return render_chunks(text, SLACK_SECTION_LIMIT)

    def _thread_ts(self, message: Outbound) -> str | None:
        """Where a reply goes: the existing thread; else, in channels and group DMs, a
        new thread under the triggering message; in a 1:1 DM (``D…``) inline."""
        if message.thread_id:
            return message.thread_id
        if not self.settings.reply_in_thread or message.chat_id.startswith("D"):
            return None
        return message.reply_to_id

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Post one chunk with chat.postMessage, threaded under the triggering message;
        returns the new message's ``ts``. Formatted chunks go as one mrkdwn section
        block with ``plain`` as the notification text; if Slack rejects the blocks the
        chunk is re-sent once as plain text (``mrkdwn: false``)."""
        post = partial(
            self._post, channel=message.chat_id, thread_ts=self._thread_ts(message),
            # Slack parses <...> in every text field: &, <, > must always be escaped.
            text=escape(chunk.plain),
            # names the chunk, so find_sent can tell it arrived after an ambiguous failure
            metadata=chunk_metadata(message.reply_id, index),
        )
        if chunk.formatted:
            try:
                return await post(
                    blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": chunk.text}}])
            except FormattingRejected:
                log.warning("slack[%s]: blocks rejected for reply %s chunk %d, sending plain",
                            self.account, message.reply_id, index)
        return await post(mrkdwn=False)

    async def find_sent(self, message: Outbound, index: int) -> str | None:
        """After an ambiguous post: the chunk's ``ts`` if the conversation (or thread)
        shows it by its metadata (channels/slack/sent.py), else None (post again)."""
        with mapped(Exception, partial(map_error, "conversations.history")):
            return await find_posted(self._web, message.chat_id, self._thread_ts(message),
                                     message.reply_id, index)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """``url_private`` with the bot token, from Slack's file host (or the configured
        API origin) only (``channels.download``)."""
        if not attachment.url:
            raise PermanentError("no_url", "slack file without url_private")
        hosts = {"files.slack.com", host_of(self.settings.api_base_url) or "slack.com"}
        token = self._secrets.bot_token.get_secret_value()
        return await fetch_capped(attachment.url, max_bytes, hosts=hosts,
                                  headers={"Authorization": f"Bearer {token}"})

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """files_upload_v2 (get an upload URL, upload, complete into the chat and thread);
        the caption is the initial comment. Returns the file's id (the share's message
        is posted by Slack afterwards)."""
        with mapped(Exception, partial(map_error, "files.completeUploadExternal")):
            response = await self._web.files_upload_v2(
                channel=message.chat_id, thread_ts=self._thread_ts(message), file=data,
                filename=name, title=name, initial_comment=escape(caption) or None)
        shared = response.get("file") or {}
        return str(shared.get("id", "")) if isinstance(shared, dict) else ""

    async def _post(self, **kwargs: Any) -> str:
        with mapped(Exception, partial(map_error, "chat.postMessage")):
            response = await self._web.chat_postMessage(**kwargs)
        ts = response.get("ts")
        return str(ts) if ts else ""

"""``TelegramChannel``: Telegram Bot API in (long polling or webhook) and out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import SecretStr
from telegram import Bot, BotCommand, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

from channels.base import (
    NO_CONTEXT,
    Channel,
    ChannelContext,
    ChannelLimits,
    Chunk,
    InboundSink,
)
from channels.envsecret import read_secret
from channels.errors import AttachmentTooLarge, FormattingRejected, PermanentError, mapped
from channels.models import Attachment, Outbound
from channels.pools import httpx_limits, httpx_transport
from channels.pull import PullLoop
from channels.redact import protect
from channels.split import utf16_len
from channels.tasks import cancel_task, start_task
from channels.telegram.errors import map_error
from channels.telegram.normalize import BotIdentity
from channels.telegram.poller import poll_loop
from channels.telegram.render import TELEGRAM_TEXT_LIMIT, render_chunks
from channels.telegram.settings import TelegramSettings
from channels.telegram.webhook import WebhookEndpoint

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger(__name__)

#: Telegram's limits (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this):
#: 4096 UTF-16 units per message; "avoid sending more than one message per second" to a
#: chat; "not more than 20 messages per minute" to a group; about 30 messages per second
#: overall. ``per_chat_interval`` carries the first; Telegram's own ``retry_after``
#: (which the outbox waits) covers the rest.
TELEGRAM_LIMITS = ChannelLimits(
    max_message_len=TELEGRAM_TEXT_LIMIT,
    measure=utf16_len,
    per_chat_interval=1.0,
    burst=1,
)

#: Telegram's rule for setWebhook's secret_token
_SECRET_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


class _QuietBot(Bot):
    """python-telegram-bot's Bot, whose repr would print the token."""

    def __repr__(self) -> str:
        return "Bot[telegram]"


def _request(pool_size: int) -> HTTPXRequest:
    """PTB's httpx request with our keep-alive and connect retries (``channels.pools``).
    The transport outlives a shutdown: PTB builds a new client on it at the next
    initialize, and httpcore's pool opens new connections after its close."""
    return HTTPXRequest(
        connection_pool_size=pool_size,
        httpx_kwargs={"limits": httpx_limits(pool_size),
                      "transport": httpx_transport(pool_size)},
    )


def _chat(chat_id: str) -> int | str:
    """Telegram chat ids are integers, or "@channelusername"."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


class TelegramChannel(Channel):
    """A Telegram bot account: long polling or webhook in, sendMessage (HTML) out."""

    name = "telegram"
    limits = TELEGRAM_LIMITS

    def __init__(
        self,
        settings: TelegramSettings,
        token: SecretStr,
        *,
        account: str = "default",
        webhook_secret: SecretStr | None = None,
    ) -> None:
        if settings.mode == "webhook" and webhook_secret is None:
            raise ValueError("telegram webhook mode needs a webhook secret")
        self.settings = settings
        self.account = account
        self._token = token
        self._webhook_secret = webhook_secret
        # before the Bot exists: it logs its token-bearing base URL when built
        for secret in self._secrets():
            protect(secret)
        self._bot = _QuietBot(
            token.get_secret_value(),
            base_url=settings.base_url,
            base_file_url=settings.base_file_url,
            request=_request(8),
            # long polls get their own connection so sends never queue behind one
            get_updates_request=_request(1),
        )
        self._endpoint = (
            WebhookEndpoint(webhook_secret, lambda: self._bot, account)
            if settings.mode == "webhook" and webhook_secret is not None
            else None
        )
        self.identity: BotIdentity | None = None
        self.poller: PullLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"TelegramChannel(account={self.account!r}, mode={self.settings.mode!r})"

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        settings = TelegramSettings.model_validate(block)
        token = read_secret(env, settings.token_env, "the bot token from @BotFather (or set "
                            "token_env to the variable that holds it)")
        secret: SecretStr | None = None
        if settings.mode == "webhook":
            value = env.get(settings.webhook_secret_env, "").strip()
            if not _SECRET_TOKEN.match(value):
                raise ValueError(
                    f"channels.telegram: mode = 'webhook' needs {settings.webhook_secret_env} set "
                    "to a secret of 1-256 characters A-Z a-z 0-9 _ - (Telegram echoes it in "
                    "X-Telegram-Bot-Api-Secret-Token)"
                )
            secret = SecretStr(value)
        return cls(settings, token, account=account, webhook_secret=secret)

    def _secrets(self) -> tuple[str, ...]:
        return tuple(s.get_secret_value() for s in (self._token, self._webhook_secret) if s)

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """PTB's exceptions as ``channels.errors``, the secrets scrubbed from their text."""
        return mapped(TelegramError, lambda error: map_error(error, self._secrets()))

    def webhook_concurrency(self) -> int:
        return self.settings.webhook_max_connections if self.settings.mode == "webhook" else 0

    def web_routes(self) -> list[web.RouteDef]:
        if self._endpoint is None:
            return []
        return [web.post(self.settings.webhook_path, self._endpoint.handle)]

    async def start(self, sink: InboundSink) -> None:
        """Check the token (getMe), then poll or arm the webhook. Raises PermanentError
        when Telegram refuses the token, NetworkError when it cannot be reached."""
        with self._errors():
            await self._bot.initialize()
            me = self._bot.bot
            self.identity = BotIdentity(me.id, self.settings.bot_username or me.username or "")
            if self._endpoint is not None:
                if self.settings.webhook_url and self._webhook_secret is not None:
                    await self._bot.set_webhook(
                        self.settings.webhook_url,
                        secret_token=self._webhook_secret.get_secret_value(),
                        allowed_updates=self.settings.allowed_updates,
                        max_connections=self.settings.webhook_max_connections,
                    )
                self._endpoint.identity = self.identity
                self._endpoint.sink = sink
                return
            # getUpdates is refused while a webhook is set (e.g. after switching modes)
            await self._bot.delete_webhook(drop_pending_updates=False)
        self.poller = poll_loop(
            self._bot, self.settings, self.identity, sink, self.cursor_store, self.account
        )
        self._task = start_task(self.poller.run(), name=f"telegram-poll-{self.account}",
                                log=log, what="telegram: polling loop")

    async def check(self) -> str | None:
        """getMe: does Telegram accept the token? (``pynanoclaw status``; the channel
        need not be started.)"""
        try:
            with self._errors():
                await self._bot.initialize()
                me = self._bot.bot
        finally:
            with contextlib.suppress(TelegramError):
                await self._bot.shutdown()
        return f"@{me.username}"

    async def stop(self) -> None:
        if self._endpoint is not None:
            self._endpoint.sink = None
        await cancel_task(self._task)
        self._task = None
        with contextlib.suppress(TelegramError):
            await self._bot.shutdown()

    async def register_commands(self, commands: list[tuple[str, str]]) -> None:
        """``setMyCommands`` (default scope): Telegram's "/" menu shows these."""
        with self._errors():
            await self._bot.set_my_commands([BotCommand(n, d) for n, d in commands])

    def render(self, text: str) -> list[Chunk]:
        return render_chunks(text, self.limits.max_message_len)

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send one chunk as HTML, replying to ``reply_to_id`` with the first chunk and
        staying in the forum topic ``thread_id``; resend as plain text if Telegram
        cannot parse the HTML."""
        if chunk.formatted:
            try:
                return await self._send(message, chunk.text, ParseMode.HTML, index)
            except FormattingRejected as rejected:
                log.warning("telegram: formatting rejected (%s); sending plain text", rejected)
        try:
            return await self._send(message, chunk.plain, None, index)
        except FormattingRejected as rejected:  # cannot happen without parse_mode
            raise PermanentError("formatting_rejected", str(rejected)) from None

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """sendDocument (multipart), in the forum topic ``thread_id``; the caption as
        plain text (Telegram's limit: 1024 characters)."""
        with self._errors():
            sent = await self._bot.send_document(
                chat_id=_chat(message.chat_id), document=data, filename=name,
                caption=caption[:1024] or None,
                message_thread_id=int(message.thread_id) if message.thread_id else None)
        return str(sent.message_id)

    async def _send(self, message: Outbound, text: str, parse_mode: str | None, index: int) -> str:
        reply = (
            ReplyParameters(message_id=int(message.reply_to_id), allow_sending_without_reply=True)
            if message.reply_to_id and index == 0
            else None
        )
        with self._errors():
            sent = await self._bot.send_message(
                chat_id=_chat(message.chat_id),
                text=text,
                parse_mode=parse_mode,
                message_thread_id=int(message.thread_id) if message.thread_id else None,
                reply_parameters=reply,
            )
        return str(sent.message_id)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """getFile, then the file's download URL (the Bot API serves files up to 20 MB).
        getFile states the size, so a file over ``max_bytes`` is refused before a byte
        of it is read; a file whose size Telegram did not state is checked after."""
        with self._errors():
            file = await self._bot.get_file(attachment.id)
            AttachmentTooLarge.check(file.file_size, max_bytes)
            data = bytes(await file.download_as_bytearray())
        AttachmentTooLarge.check(len(data), max_bytes)
        return data

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        """Best effort: a failed typing indicator is logged, never raised."""
        try:
            await self._bot.send_chat_action(
                chat_id=_chat(chat_id),
                action=ChatAction.TYPING,
                message_thread_id=int(thread_id) if thread_id else None,
            )
        except TelegramError as error:
            log.info("telegram: typing indicator failed: %s", map_error(error, self._secrets()))

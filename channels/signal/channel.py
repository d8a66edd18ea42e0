"""``SignalChannel``: a running ``signal-cli daemon --http`` in and out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from pydantic import SecretStr

from channels.base import (
    NO_CONTEXT,
    Channel,
    ChannelContext,
    ChannelLimits,
    Chunk,
    InboundSink,
)
from channels.envsecret import read_secret
from channels.errors import FormattingRejected
from channels.models import Attachment, Outbound
from channels.pools import aiohttp_connector
from channels.signal.attachments import fetch as fetch_signal_attachment
from channels.signal.errors import USER_ERROR, classify
from channels.signal.events import EventStream
from channels.signal.files import data_uri, fit_caption
from channels.signal.health import SignalHealth
from channels.signal.normalize import GROUP_PREFIX, BotIdentity, split_message_id
from channels.signal.render import SIGNAL_TEXT_LIMIT, SignalChunk, render_chunks
from channels.signal.rpc import RpcError, SignalRpc
from channels.signal.settings import SignalSettings
from channels.split import utf8_len
from channels.tasks import cancel_task, start_task

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger("channels.signal")

#: 2000 UTF-8 bytes per body (signal-cli ServiceConfig.MAX_MESSAGE_SIZE_BYTES). Signal
#: publishes no per-chat rate; one message a second per chat stays clear of the server's
#: rate limiter, whose retry-after signal-cli reports (mapped to ``RateLimited``).
SIGNAL_LIMITS = ChannelLimits(max_message_len=SIGNAL_TEXT_LIMIT, measure=utf8_len,
                              per_chat_interval=1.0, burst=1)


def _target(chat_id: str) -> dict[str, Any]:
    """signal-cli's addressing: ``groupId`` for a group, ``recipient`` (number or uuid)
    for a DM."""
    if chat_id.startswith(GROUP_PREFIX):
        return {"groupId": chat_id[len(GROUP_PREFIX):]}
    return {"recipient": [chat_id]}


class SignalChannel(Channel):
    """One Signal account served by signal-cli: events stream in, JSON-RPC ``send`` out."""

    name = "signal"
    limits = SIGNAL_LIMITS

    def __init__(
        self,
        settings: SignalSettings,
        *,
        account: str = "default",
        auth: SecretStr | None = None,
    ) -> None:
        self.settings = settings
        self.account = account
        self._auth = auth
        self.bot = BotIdentity(settings.number, settings.uuid)
        self.status = SignalHealth(settings.number)
        self._session: aiohttp.ClientSession | None = None
        self._rpc: SignalRpc | None = None
        self.stream: EventStream | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"SignalChannel(account={self.account!r}, url={self.settings.url!r})"

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        settings = SignalSettings.model_validate(block)
        auth = None if settings.auth_env is None else read_secret(
            env, settings.auth_env, "the Authorization header value your proxy expects "
            "(auth_env names it), or remove auth_env")
        return cls(settings, account=account, auth=auth)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._auth.get_secret_value()} if self._auth else {}

    def _rpc_on(self, session: aiohttp.ClientSession) -> SignalRpc:
        return SignalRpc(session, self.settings.url, account=self.settings.number,
                         timeout=self.settings.request_timeout)

    async def _call(self, method: str, params: dict[str, Any], *,
                    max_answer: int | None = None) -> Any:
        if self._rpc is not None:
            return await self._rpc.call(method, params, max_answer=max_answer)
        # not started, or stopped while the outbox finishes: a session for this call only
        async with aiohttp.ClientSession(headers=self._headers()) as session:
            return await self._rpc_on(session).call(method, params, max_answer=max_answer)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file signal-cli already downloaded, by its id (``getAttachment``)."""
        return await fetch_signal_attachment(self._call, attachment, max_bytes)

    def health(self) -> dict[str, Any]:
        return {**self.status.snapshot(), "receive_mode": self.settings.receive_mode}

    async def start(self, sink: InboundSink) -> None:
        """Open the events stream in the background; return once it is connected or
        ``connect_wait`` passed (the stream keeps reconnecting; /healthz shows it)."""
        self._session = aiohttp.ClientSession(headers=self._headers(),
                                              connector=aiohttp_connector())
        self._rpc = self._rpc_on(self._session)
        self.stream = EventStream(self._session, self.settings, self.bot, sink,
                                  self.cursor_store, self.status, account=self.account)
        self._task = start_task(self.stream.run(), name=f"signal-events-{self.account}",
                                log=log, what="signal: events loop")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stream.connected.wait(), self.settings.connect_wait)

    async def stop(self) -> None:
        await cancel_task(self._task)
        self._task = None
        if self._session is not None:
            self._rpc = None
            await self._session.close()
            self._session = None

    def render(self, text: str) -> list[Chunk]:
        return render_chunks(text, self.limits.max_message_len)

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send one chunk with its text styles, quoting ``reply_to_id`` with the first
        chunk; returns the sent message's timestamp (Signal's message id)."""
        params = {**_target(message.chat_id), "message": chunk.text}
        styles = chunk.styles if isinstance(chunk, SignalChunk) and chunk.formatted else ()
        if styles:
            params["textStyle"] = list(styles)
        quoted = split_message_id(message.reply_to_id) if message.reply_to_id else None
        if quoted is not None and index == 0:
            params["quoteAuthor"], params["quoteTimestamp"] = quoted
        return await self._send(params, styled=bool(styles))

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """``send`` with the file as a data URI attachment (``signal.files``: the daemon
        may run on another machine, so no path is shared) and the caption as its text.
        signal-cli takes no idempotency key and cannot look a sent message up: a re-send
        after a lost answer goes twice."""
        params = {**_target(message.chat_id), "message": fit_caption(caption),
                  "attachments": [data_uri(data, name)]}
        return await self._send(params)

    async def _send(self, params: dict[str, Any], *, styled: bool = False) -> str:
        """``send``; returns the sent message's timestamp (Signal's message id). A
        refusal of the text styles is ``FormattingRejected``; an operator problem
        (``classify``) goes to ``status`` as well as raised."""
        try:
            result = await self._call("send", params)
        except RpcError as error:
            if styled and error.code == USER_ERROR and "style" in error.message.lower():
                raise FormattingRejected(error.message) from None
            mapped, problem = classify(error, self.settings.number)
            if problem is not None:
                self.status.report(problem)
            raise mapped from None
        self.status.sent_ok()
        stamp = result.get("timestamp") if isinstance(result, dict) else None
        return str(stamp) if stamp is not None else ""

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        """Best effort: a failed typing indicator is logged, never raised."""
        try:
            await self._call("sendTyping", _target(chat_id))
        except Exception as error:
            log.info("signal: typing indicator failed (%s)", type(error).__name__)

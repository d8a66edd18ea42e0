"""``DiscordChannel``: the Discord gateway and REST API behind the ``Channel`` seam."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Self

import discord
from pydantic import SecretStr

import channels.discord.endpoint as endpoint
from channels.base import NO_CONTEXT, Channel, ChannelContext, ChannelLimits, Chunk, InboundSink
from channels.discord.changes import change_to_inbound
from channels.discord.client import Client, check_token, intents
from channels.discord.cursors import LastSeen
from channels.discord.errors import CALL_ERRORS, login_error, map_error
from channels.discord.files import FileSending
from channels.discord.nonce import send_nonce
from channels.discord.normalize import NAME, Place, is_conversation, to_inbound
from channels.discord.places import Places
from channels.discord.render import MAX_MESSAGE_LEN, render
from channels.discord.settings import DiscordSettings
from channels.discord.transport import surfacing_trace
from channels.envsecret import read_secret
from channels.errors import NetworkError, PermanentError, mapped
from channels.models import Inbound, Outbound
from channels.retry import retrying

log = logging.getLogger(__name__)


#: Nobody gets pinged by what the model writes (no @everyone/@here, roles or users);
#: only the author of the message being answered, through the reply itself.
ALLOWED_MENTIONS = discord.AllowedMentions(
    everyone=False, users=False, roles=False, replied_user=True
)


@dataclass(frozen=True)
class _Pending:
    """A normalized message waiting for the sink; ``channel_id`` is where it was posted
    (the thread itself for thread messages), ``unresolved`` that the channel was not in
    the cache and may turn out to be a thread."""

    inbound: Inbound
    channel_id: int
    unresolved: bool


class DiscordChannel(FileSending, endpoint.CdnFiles, Channel):
    """One Discord bot account.

    Receiving: the gateway websocket (discord.py ``Client``) with the guilds,
    guild_messages, dm_messages and message_content intents. The gateway has no ack
    and no cursor: an event is delivered at most once per session; after a dropped
    connection discord.py RESUMEs and Discord replays what was missed, but a session
    that cannot be resumed (and any restart) loses its gap. So the durable step is
    ours: each message goes through one in-order queue into the sink, a sink failure
    (Redis down) is retried with capped jittered backoff instead of dropping the
    message, and once it is durable the channel's mark in the cursor store moves
    (``cursors.LastSeen``). After every READY the adapter reads each marked
    channel's history after its mark (``backfill_limit`` messages at most) and feeds
    it through the same queue. The message id is the dedupe key, so a replayed or
    read-back message the inbox already holds is dropped there.

    Sending (files: ``files.FileSending``): REST ``POST /channels/{id}/messages`` via
    discord.py, which keeps Discord's per-route rate-limit buckets (waiting before an
    exhausted one). A 429 or 5xx answer is not slept on inside the call: it surfaces at
    once as ``RateLimited(retry_after)`` / ``TransientError`` for the outbox (``transport``).
    """

    name = NAME
    #: Developer docs: 2000 characters per message; message creation is limited to
    #: about 5 per 5 s per channel (the route bucket discord.py reads from headers).
    limits = ChannelLimits(max_message_len=MAX_MESSAGE_LEN, per_chat_interval=1.0, burst=5)

    #: Backoff for a failing sink (seconds); a class attribute so tests can shorten it.
    sink_retry_base = 0.5
    sink_retry_cap = 30.0
    #: How long ``start`` waits for the gateway's READY.
    start_timeout = 30.0
    #: How long ``stop`` lets queued messages drain into the sink.
    stop_drain_timeout = 5.0

    def __init__(
        self,
        settings: DiscordSettings,
        token: SecretStr,
        *,
        account: str = "default",
    ) -> None:
        self.settings = settings
        self.account = account
        self._token = token
        self._client: Client | None = None
        self._sink: InboundSink | None = None
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._last_seen = LastSeen(None)
        self._backfill_task: asyncio.Task[None] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._conn_task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._pointed = False
        self._stopping = False
        self._places = Places(self)

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        """Build from a ``[channels.discord]`` block; the token comes from ``env``."""
        settings = DiscordSettings.model_validate(block)
        token = read_secret(env, settings.token_env, "the Discord bot token (Developer "
                            "Portal > your application > Bot > Reset Token), or point "
                            "channels.discord.token_env at the variable that holds it")
        return cls(settings, token, account=account)

    def __repr__(self) -> str:
        return f"DiscordChannel(account={self.account!r})"

    # ------------------------------------------------------------------ life cycle
    async def check(self) -> str | None:
        """Does Discord accept the token? (``pynanoclaw status``; need not be started.)"""
        return await check_token(self.settings, self._token.get_secret_value())

    async def start(self, sink: InboundSink) -> None:
        """Log in, connect the gateway and return once READY arrived.

        Raises ``PermanentError`` for a rejected token or a Message Content intent not
        enabled in the Developer Portal, ``NetworkError`` when Discord is unreachable.
        """
        if self._client is not None:
            raise RuntimeError("DiscordChannel already started")
        self._sink = sink
        self._stopping = False
        self._connected = asyncio.Event()
        base = self.settings.api_base_url
        if base:
            endpoint.acquire(base)
            self._pointed = True
        self._client = Client(
            self,
            intents=intents(),
            max_ratelimit_timeout=self.settings.max_ratelimit_timeout,
            http_trace=surfacing_trace(),
            heartbeat_timeout=self.settings.heartbeat_timeout,
            chunk_guilds_at_startup=False,
        )
        try:
            await self._connect(self._client)
        except BaseException:
            await self._teardown()
            raise

    async def _connect(self, client: Client) -> None:
        self._last_seen = LastSeen(self.cursor_store)
        try:
            await self._last_seen.load()
        except Exception as exc:
            log.warning("discord: cursor store unavailable (%s); no read-back of messages "
                        "missed while away this time", type(exc).__name__)
        with mapped(CALL_ERRORS, partial(login_error, token_env=self.settings.token_env)):
            await client.login(self._token.get_secret_value())
            if self.settings.api_base_url:
                url = self.settings.gateway_url
                if not url:
                    _, url, _ = await client.http.get_bot_gateway()
                endpoint.set_gateway(url)
        self._pump_task = asyncio.create_task(self._pump(), name="discord-inbound")
        self._conn_task = asyncio.create_task(
            client.connect(reconnect=True), name="discord-gateway"
        )
        ready = asyncio.create_task(self._connected.wait())
        done, _ = await asyncio.wait(
            {ready, self._conn_task},
            timeout=self.start_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
        ready.cancel()
        if self._conn_task in done:
            raise self._connect_failure(self._conn_task)
        if ready not in done:
            raise NetworkError(f"no gateway READY from Discord within {self.start_timeout:.0f}s")
        self._conn_task.add_done_callback(self._connection_ended)
        log.info("discord: connected as bot user %s", client.user.id if client.user else "?")

    def _connect_failure(self, task: asyncio.Task[None]) -> Exception:
        exc = task.exception() if not task.cancelled() else None
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            return PermanentError(
                "disallowed_intents",
                "turn on MESSAGE CONTENT INTENT under Bot > Privileged Gateway Intents "
                "in the Discord Developer Portal",
            )
        if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            return PermanentError(
                "unauthorized", f"Discord rejected the token in {self.settings.token_env}"
            )
        if exc is None:
            return NetworkError("the Discord gateway connection ended before READY")
        return map_error(exc)

    def _connection_ended(self, task: asyncio.Task[None]) -> None:
        if self._stopping or task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("discord: gateway connection gave up: %s", self._connect_failure(task))
        else:
            log.warning("discord: gateway connection ended")

    async def stop(self) -> None:
        """Stop taking messages, let queued ones reach the sink (briefly), disconnect.

        Messages arriving from here on are not taken; with a cursor store they are
        read back after the next start (the channel's mark has not passed them).
        """
        if self._client is None:
            return
        self._stopping = True
        if self._backfill_task is not None:
            self._backfill_task.cancel()
        # the pump may still need REST (thread lookup), so the client stays open
        if self._pump_task is not None and not self._pump_task.done():
            try:
                await asyncio.wait_for(self._queue.join(), timeout=self.stop_drain_timeout)
            except TimeoutError:
                log.error(
                    "discord: %d inbound message(s) not yet durable at stop were dropped",
                    self._queue.qsize(),
                )
        await self._teardown()

    async def _teardown(self) -> None:
        self._stopping = True
        for task in (self._backfill_task, self._conn_task, self._pump_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._client is not None and not self._client.is_closed():
            await self._client.close()
        self._client = None
        self._conn_task = self._pump_task = self._backfill_task = None
        self._queue = asyncio.Queue()
        if self._pointed:
            endpoint.release()
            self._pointed = False

    # ------------------------------------------------------------------ inbound
    def _enqueue(self, message: discord.Message) -> None:
        """Normalize now (discord.py mutates cached messages on later edits, so the
        message must be read as it arrived) and queue for the sink, in order."""
        client = self._client
        if self._stopping or client is None or client.user is None:
            return
        if not is_conversation(message, client.user.id):
            return
        try:
            place = self._places.now(message)
            provisional = place or Place(chat_id=str(message.channel.id), thread_id=None,
                                         is_group=True)
            inbound = to_inbound(message, provisional, bot_id=client.user.id,
                                 account=self.account)
        except Exception:
            log.exception("discord: skipped message %s that could not be normalized",
                          message.id)
            return
        self._put(_Pending(inbound, message.channel.id, place is None))

    def _enqueue_change(
        self, event: discord.RawMessageUpdateEvent | discord.RawMessageDeleteEvent
    ) -> None:
        """Queue an edit or a deletion behind the messages before it (same order)."""
        client = self._client
        if self._stopping or client is None or client.user is None:
            return
        try:
            change = change_to_inbound(event, self._places, bot_id=client.user.id,
                                       account=self.account)
        except Exception:
            log.exception("discord: skipped a change to message %s", event.message_id)
            return
        if change is not None:
            inbound, resolved = change
            self._put(_Pending(inbound, event.channel_id, not resolved))

    def _put(self, pending: _Pending) -> None:
        if self._queue.qsize() >= self.settings.inbound_buffer:
            dropped = self._queue.get_nowait()
            self._queue.task_done()
            log.error(
                "discord: inbound buffer full while the inbox is unavailable; "
                "dropped message %s",
                dropped.inbound.message_id,
            )
        self._queue.put_nowait(pending)

    async def _pump(self) -> None:
        """Feed the sink one message at a time, in gateway order."""
        while True:
            pending = await self._queue.get()
            try:
                inbound = pending.inbound
                if pending.unresolved:
                    place = await self._places.resolve(pending.channel_id)
                    inbound = inbound.model_copy(update={
                        "chat_id": place.chat_id,
                        "thread_id": place.thread_id,
                        "chat_name": place.chat_name,
                    })
                await self._deliver(inbound)
                if inbound.kind == "message":  # the mark follows new messages only
                    await self._mark(pending.channel_id, int(inbound.message_id))
            finally:
                self._queue.task_done()

    async def _mark(self, channel_id: int, message_id: int) -> None:
        try:
            await self._last_seen.advance(channel_id, message_id)
        except Exception as exc:
            # the message itself is durable; only a later read-back may repeat it
            log.warning("discord: could not move the mark of channel %s (%s)",
                        channel_id, type(exc).__name__)

    def _on_ready(self) -> None:
        self._connected.set()
        if self._stopping or not self._last_seen.enabled or not self.settings.backfill_limit:
            return
        if self._backfill_task is None or self._backfill_task.done():
            self._backfill_task = asyncio.create_task(self._backfill(), name="discord-backfill")

    async def _backfill(self) -> None:
        """Read back, through REST history, what marked channels got while the bot was
        not connected; most recently active channels first."""
        client = self._client
        assert client is not None
        for channel_id, last_id in sorted(self._last_seen.marks().items(),
                                          key=lambda item: -item[1]):
            channel = client.get_channel(channel_id) or await self._places.fetch(channel_id)
            if not isinstance(channel, discord.abc.Messageable):
                continue
            count = 0
            try:
                async for message in channel.history(
                    limit=self.settings.backfill_limit,
                    after=discord.Object(id=last_id),
                    oldest_first=True,
                ):
                    self._enqueue(message)
                    count += 1
            except CALL_ERRORS as exc:
                log.warning("discord: could not read back channel %s: %s",
                            channel_id, map_error(exc))
            if count:
                log.info("discord: read back %d message(s) in channel %s sent while away",
                         count, channel_id)

    async def _deliver(self, inbound: Inbound) -> None:
        """Retry the sink until the message is durable: the gateway will not resend."""
        sink = self._sink
        assert sink is not None

        def warn(exc: BaseException, wait: float) -> None:
            log.warning("discord: inbox unavailable (%s); retrying message %s in %.1fs",
                        type(exc).__name__, inbound.message_id, wait)

        async for attempt in retrying(initial=self.sink_retry_base,
                                      maximum=self.sink_retry_cap, on_retry=warn):
            with attempt:
                await sink(inbound)

    # ------------------------------------------------------------------ outbound
    def render(self, text: str) -> list[Chunk]:
        return render(text)

    def _require_client(self) -> Client:
        if self._client is None:
            raise NetworkError("discord channel is not started")
        return self._client

    @staticmethod
    def _snowflake(value: str, what: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise PermanentError(f"bad_{what}", f"not a Discord id: {value!r}") from None

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send one chunk into the thread (if any) else the channel; the first chunk
        replies to ``reply_to_id`` (``fail_if_not_exists=False``: a deleted trigger
        still gets its answer, just without the reply link)."""
        client = self._require_client()
        target = self._snowflake(message.thread_id or message.chat_id, "chat_id")
        reference = None
        if index == 0 and message.reply_to_id:
            reference = discord.MessageReference(
                message_id=self._snowflake(message.reply_to_id, "reply_to_id"),
                channel_id=target,
                fail_if_not_exists=False,
            )
        channel = client.get_partial_messageable(target)
        # discord.py sends ``enforce_nonce`` with every nonce: a re-send of this chunk
        # (after a dropped connection or a read timeout) gets the first message back
        nonce = send_nonce(message.reply_id, index)
        with mapped(CALL_ERRORS, map_error):
            if reference is None:
                sent = await channel.send(chunk.text, allowed_mentions=ALLOWED_MENTIONS,
                                          nonce=nonce)
            else:
                sent = await channel.send(
                    chunk.text, reference=reference, allowed_mentions=ALLOWED_MENTIONS,
                    nonce=nonce,
                )
        return str(sent.id)

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        """``POST /channels/{id}/typing``: shows "typing..." for about 10 s."""
        client = self._require_client()
        target = self._snowflake(thread_id or chat_id, "chat_id")
        with mapped(CALL_ERRORS, map_error):
            await client.http.send_typing(target)

"""The ``local`` channel: talk to the bot with no platform account, through Redis.

Its "platform" is three Redis structures (under ``<prefix>local:``):

* ``in:{account}`` (list): clients (``pynanoclaw chat``/``send``) ``RPUSH`` a JSON
  message ``{"chat_id", "is_group", "sender_id", "sender_name", "message_id", "text",
  "mention"}``;
* ``inflight:{account}`` (list): the channel ``BLMOVE``s each message there, hands it to
  the sink, and removes it only after the sink returned (so the "cursor" moves after
  durability); on start it first re-delivers whatever a crash left there;
* ``out:{account}:{chat_id}`` (stream): what the bot says: ``ack`` (the gateway holds
  the message; ``status`` is what the sink said it did: engage, context, drop,
  duplicate), ``typing``, ``chunk`` (one reply chunk) and ``done`` (a turn covering
  the listed message ids finished). Clients read it with XREAD;
* ``sent:{account}:{reply_id}:{index}`` (string): a chunk already in its stream, set in
  the same transaction as the append, so a re-sent chunk is appended once.

A group message mentions the bot when the client says so (``"mention": true``) or its
text contains ``@bot``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, Self

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.exceptions import RedisError, WatchError

from channels.base import NO_CONTEXT, Channel, ChannelContext, ChannelLimits, Chunk, InboundSink
from channels.models import Inbound, Outbound
from channels.retry import Backoff
from channels.split import split_text
from channels.tasks import cancel_task

log = logging.getLogger(__name__)

MENTION = re.compile(r"(?<!\w)@bot\b", re.IGNORECASE)
#: replies kept per chat stream for clients that read late
STREAM_MAXLEN = 1000
#: how long a sent chunk's mark is kept (as long as the outbox keeps its own)
SENT_TTL = 7 * 24 * 3600


class LocalSettings(BaseModel):
    """``[channels.local]``: nothing is required."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_message_len: int = Field(default=4000, ge=100)
    #: Redis key prefix (the gateway's; change only together with it)
    prefix: str = "pnc:"


class LocalMessage(BaseModel):
    """What a client pushes."""

    model_config = ConfigDict(extra="ignore")

    chat_id: str = Field(min_length=1, max_length=200)
    is_group: bool = False
    sender_id: str = Field(min_length=1, max_length=200)
    sender_name: str = ""
    message_id: str = Field(min_length=1, max_length=200)
    text: str
    mention: bool = False
    chat_name: str | None = None


class LocalKeys:
    def __init__(self, prefix: str, account: str) -> None:
        self.inbox = f"{prefix}local:in:{account}"
        self.inflight = f"{prefix}local:inflight:{account}"
        self._out = f"{prefix}local:out:{account}:"
        self._sent = f"{prefix}local:sent:{account}:"

    def out(self, chat_id: str) -> str:
        return self._out + chat_id

    def sent(self, reply_id: str, index: int) -> str:
        """Present once the chunk is in its chat's stream."""
        return f"{self._sent}{reply_id}:{index}"


class LocalChannel(Channel):
    """A chat with no platform: clients speak to the gateway through Redis."""

    name = "local"

    def __init__(
        self, redis_url: str, *, account: str = "default", settings: LocalSettings | None = None
    ) -> None:
        self.account = account
        self.settings = settings or LocalSettings()
        self.limits = ChannelLimits(max_message_len=self.settings.max_message_len,
                                    per_chat_interval=0.0, burst=1)
        self.keys = LocalKeys(self.settings.prefix, account)
        self._url = redis_url
        self._r: aioredis.Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        settings = LocalSettings.model_validate(block)
        if not context.redis_url:
            raise ValueError("the local channel needs the gateway's Redis (its context has "
                             "no redis_url)")
        return cls(context.redis_url, account=account, settings=settings)

    @property
    def redis(self) -> aioredis.Redis:
        if self._r is None:
            self._r = aioredis.Redis.from_url(self._url, decode_responses=True)
        return self._r

    async def start(self, sink: InboundSink) -> None:
        await self.redis.ping()
        self._stopping.clear()
        self._task = asyncio.get_running_loop().create_task(self._receive(sink))

    async def stop(self) -> None:
        self._stopping.set()
        await cancel_task(self._task)
        self._task = None
        if self._r is not None:
            await self._r.aclose()
            self._r = None

    def normalize(self, raw: bytes | str) -> Inbound:
        """Client JSON -> ``Inbound``. Raises ``ValueError`` for a malformed message."""
        try:
            m = LocalMessage.model_validate_json(raw)
        except ValidationError as err:
            raise ValueError(f"malformed local message: {err.error_count()} problems") from None
        return Inbound(
            channel=self.name, account=self.account, chat_id=m.chat_id,
            chat_name=m.chat_name or m.chat_id, is_group=m.is_group, sender_id=m.sender_id,
            sender_name=m.sender_name or m.sender_id, message_id=m.message_id, text=m.text,
            mentions_bot=m.mention or bool(MENTION.search(m.text)),
        )

    async def _receive(self, sink: InboundSink) -> None:
        r = self.redis
        backoff = Backoff(0.1, 5.0)
        while not self._stopping.is_set():
            try:
                # a crash between the move and the sink left these: deliver them again
                raw = await r.lindex(self.keys.inflight, 0)
                if raw is None:
                    raw = await r.blmove(self.keys.inbox, self.keys.inflight, 1, "LEFT", "RIGHT")
                if raw is None:
                    continue
                await self._deliver(raw, sink)
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as err:
                log.warning("local channel: Redis unavailable (%s); retrying", err)
                await backoff.sleep()
            except Exception:
                # a message the gateway cannot take at all would block the channel forever
                log.exception("local channel: dropping a message the gateway rejected")
                with contextlib.suppress(RedisError, OSError):
                    await r.lpop(self.keys.inflight)

    async def _deliver(self, raw: bytes | str, sink: InboundSink) -> None:
        r = self.redis
        try:
            msg = self.normalize(raw)
        except ValueError as err:
            log.warning("local channel: skipped a message: %s", err)
            await r.lrem(self.keys.inflight, 1, raw)  # type: ignore[arg-type]
            return
        status = await sink(msg)  # raises if not durable: the message stays in flight
        async with r.pipeline(transaction=True) as pipe:
            pipe.xadd(self.keys.out(msg.chat_id), {"type": "ack", "message_id": msg.message_id,
                                                   "status": status or ""},
                      maxlen=STREAM_MAXLEN, approximate=True)
            pipe.lrem(self.keys.inflight, 1, raw)  # type: ignore[arg-type]
            await pipe.execute()

    def render(self, text: str) -> list[Chunk]:
        return [Chunk(text=c, plain=c, formatted=False)
                for c in split_text(text, self.limits.max_message_len)]

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Append the chunk to the chat's stream once per (reply id, index).

        Like Matrix's transaction id, the "platform" dedupes a re-send itself: the
        outbox's sent mark is written after this returns, so a Redis that dies between
        the two (the embedded server SIGKILLed) would otherwise show the chunk twice.
        The append and the chunk's mark are one transaction, watched so that a second
        sender of the same chunk finds the mark and appends nothing."""
        fields: dict[str, str] = {
            "type": "chunk", "reply_id": message.reply_id, "index": str(index),
            "reply_to_id": message.reply_to_id or "", "text": chunk.plain}
        return await self._append_once(message, index, fields)

    async def _append_once(self, message: Outbound, index: int, fields: dict[str, str]
                           ) -> str:
        mark = self.keys.sent(message.reply_id, index)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(mark)
                    earlier = await pipe.get(mark)
                    if earlier is not None:
                        return str(earlier)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.xadd(self.keys.out(message.chat_id), fields,  # type: ignore[arg-type]
                              maxlen=STREAM_MAXLEN, approximate=True)
                    pipe.set(mark, "sent", ex=SENT_TTL)
                    entry, _ = await pipe.execute()
                    return str(entry)
                except WatchError:
                    continue

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """Append the file (base64) to the chat's stream, once per reply id: the same
        watched transaction as a chunk's (index 0 of the file's reply)."""
        fields = {"type": "file", "reply_id": message.reply_id, "name": name,
                  "caption": caption, "size": str(len(data)),
                  "data": base64.b64encode(data).decode()}
        return await self._append_once(message, 0, fields)

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        await self.redis.xadd(self.keys.out(chat_id), {"type": "typing"},
                              maxlen=STREAM_MAXLEN, approximate=True)

    async def turn_done(
        self, chat_id: str, thread_id: str | None, message_ids: list[str], reply_id: str | None
    ) -> None:
        await self.redis.xadd(
            self.keys.out(chat_id),
            {"type": "done", "message_ids": json.dumps(message_ids), "reply_id": reply_id or ""},
            maxlen=STREAM_MAXLEN, approximate=True,
        )

"""Client side of the ``local`` channel: what ``pynanoclaw chat`` and ``send`` use.

It pushes a message into the local channel's inbox list and reads the chat's
``out`` stream: the ``ack`` (the gateway made it durable) with the inbox's verdict
(engage, context, drop, duplicate), then reply ``chunk``s and the ``done`` event of the
turn that covered the message.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from channels.local import LocalKeys


@dataclass
class LocalExchange:
    """What happened to one message sent through the local channel."""

    message_id: str
    status: str  # engage | context | drop | duplicate | command | pairing | timeout
    chunks: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def reply(self) -> str | None:
        return "".join(self.chunks) if self.chunks else None


class LocalClient:
    """Talks to a running gateway's local channel through Redis."""

    def __init__(self, redis_url: str, *, account: str = "default", prefix: str = "pnc:") -> None:
        self._r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        self.account = account
        self._local = LocalKeys(prefix, account)

    async def aclose(self) -> None:
        await self._r.aclose()

    async def last_id(self, chat_id: str) -> str:
        """The chat stream's newest entry id: read after it to see only what follows."""
        entries: Any = await self._r.xrevrange(self._local.out(chat_id), count=1)
        return str(entries[0][0]) if entries else "0-0"

    async def push(
        self, *, chat_id: str, user: str, text: str, is_group: bool = False,
        mention: bool = False, message_id: str | None = None,
    ) -> str:
        message_id = message_id or uuid.uuid4().hex
        payload = {"chat_id": chat_id, "is_group": is_group, "sender_id": user,
                   "sender_name": user, "message_id": message_id,
                   "text": text, "mention": mention}
        await self._r.rpush(self._local.inbox, json.dumps(payload))
        return message_id

    async def events(self, chat_id: str, after: str, block_ms: int = 1000
                     ) -> tuple[str, list[dict[str, str]]]:
        """Stream entries of the chat after ``after``; returns (new cursor, events)."""
        resp: Any = await self._r.xread({self._local.out(chat_id): after}, block=block_ms,
                                        count=100)
        out: list[dict[str, str]] = []
        for _, entries in resp or []:
            for entry_id, fields in entries:
                after = entry_id
                out.append(dict(fields))
        return after, out

    async def ask(
        self, *, chat_id: str, user: str, text: str, is_group: bool = False,
        mention: bool = False, timeout: float = 120.0, message_id: str | None = None,
    ) -> LocalExchange:
        """Send one message and wait for its outcome: no turn (context/drop), or the
        turn that covered it finished (with or without a reply)."""
        after = await self.last_id(chat_id)
        mid = await self.push(chat_id=chat_id, user=user, text=text, is_group=is_group,
                              mention=mention, message_id=message_id)
        ex = LocalExchange(message_id=mid, status="timeout")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        acked = False
        reply_id: str | None = None
        chunks: dict[str, dict[int, str]] = {}
        while loop.time() < deadline:
            after, events = await self.events(chat_id, after, block_ms=500)
            for ev in events:
                kind = ev.get("type")
                if kind == "ack" and ev.get("message_id") == mid:
                    acked = True
                    ex.status = ev.get("status") or "duplicate"
                    if ex.status not in ("engage", "command", "pairing"):  # these reply
                        return ex
                elif kind == "chunk":
                    chunks.setdefault(ev["reply_id"], {})[int(ev["index"])] = ev["text"]
                elif kind == "done" and mid in json.loads(ev.get("message_ids", "[]")):
                    reply_id = ev.get("reply_id") or None
                    ex.done = True
            # a command's answer can overtake the channel's ack, which carries the status
            if ex.done and acked:
                if reply_id:
                    parts = chunks.get(reply_id, {})
                    ex.chunks = [parts[i] for i in sorted(parts)]
                return ex
        return ex

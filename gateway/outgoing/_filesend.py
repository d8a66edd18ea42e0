"""The outbox's ``file`` events: a file a worker stored for a chat, sent once.

The event names the file by content hash; the bytes are read from the chat's own group
dir (``GroupFiles.outbox_file``: no path travels in the event) and checked against the
hash. Once, like a reply's chunk: the sent mark of (reply id, 0) is checked before and
set with the outcome after, and the local channel dedupes a re-send itself. A platform
that cannot send files, or refuses this one for good, gets a text note in the chat
instead (its own reply id: once too). A transient failure leaves the event for the
outbox to retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from channels.base import Channel, DeliveryReport
from channels.errors import PermanentError, TransientError
from channels.models import Outbound, group_key
from gateway.intake._groupfiles import GroupFiles
from gateway.outgoing._delivery import DeliveryRecorder
from gateway.outgoing._ratelimit import RateLimiter
from gateway.queue import Keys

log = logging.getLogger("gateway.outgoing._outbox")

#: sends a text reply through the outbox's own path (``Outbox.deliver``)
TextSender = Callable[[Channel, Outbound], Awaitable[bool]]


class FileSender:
    """Sends ``file`` events for one outbox."""

    def __init__(self, client: aioredis.Redis, keys: Keys, files: GroupFiles | None,
                 outcomes: DeliveryRecorder, send_text: TextSender) -> None:
        self._r = client
        self._keys = keys
        self._files = files
        self._outcomes = outcomes
        self._send_text = send_text
        self._limiter = RateLimiter(client, keys)

    async def deliver(self, channel: Channel, data: dict[str, Any]) -> bool:
        """True: done with the event (sent, or told why not); False: retry later."""
        ref = dict(data.pop("file", None) or {})
        msg = Outbound.model_validate(data)
        name = str(ref.get("name") or "file")
        if await self._r.exists(self._keys.sent(msg.reply_id, 0)):
            return True
        try:
            blob = await asyncio.to_thread(self._read, msg, str(ref.get("sha256", "")))
        except (OSError, ValueError) as err:
            log.error("outbox: file %s of reply %s cannot be read (%s)", name, msg.reply_id,
                      err)
            return await self._note(channel, msg, name, "the stored copy is missing")
        try:
            await self._limiter.acquire(channel.name, msg.chat_id, channel.limits)
            platform_id = await channel.send_file(msg, blob, name, msg.text)
        except PermanentError as err:
            await self._outcomes.record(self._report(msg, False, err.reason), mark_sent=True)
            return await self._note(channel, msg, name, err.reason)
        except TransientError as err:
            log.warning("outbox: %s file of reply %s failed (%s); will retry", channel.name,
                        msg.reply_id, err)
            return False
        await self._outcomes.record(self._report(msg, True, platform_id or "sent"),
                                    mark_sent=True)
        return True

    def _read(self, msg: Outbound, sha256: str) -> bytes:
        if self._files is None:
            raise ValueError("this outbox has no data dir")
        blob = self._files.outbox_file(group_key(msg.channel, msg.chat_id), sha256).read_bytes()
        if hashlib.sha256(blob).hexdigest() != sha256:
            raise ValueError("the stored copy does not match its hash")
        return blob

    async def _note(self, channel: Channel, msg: Outbound, name: str, why: str) -> bool:
        note = msg.model_copy(update={"text": f"(I could not send the file {name}: {why}.)",
                                      "reply_id": f"{msg.reply_id}.note"})
        return await self._send_text(channel, note)

    @staticmethod
    def _report(msg: Outbound, delivered: bool, detail: str) -> DeliveryReport:
        return DeliveryReport(channel=msg.channel, account=msg.account, chat_id=msg.chat_id,
                              reply_id=msg.reply_id, index=0, delivered=delivered,
                              detail=detail)

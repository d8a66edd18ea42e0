"""The outbox's ``file`` events: a file a worker stored for a chat, sent once.

The event names the file by content hash; the bytes are read from the chat's own group
dir (``GroupFiles.outbox_file``: no path travels in the event) and checked against the
hash. Once, like a reply's chunk: the sent mark of (reply id, 0) is checked before and
set with the outcome after, and the local channel dedupes a re-send itself. After an
ambiguous send (``MaybeSent``) the platform is asked first (``Channel.find_sent`` of
(reply id, 0): a WhatsApp tracker's status, an email's own copy), as for a chunk. A platform
that cannot send files, or refuses this one for good, gets a text note in the chat
instead (its own reply id: once too). A transient failure leaves the event for the
outbox to retry.

``prune_sent_files`` (the media job's hourly sweep, beside the attachments' retention) deletes a
stored file once every send naming it is marked sent, which a refusal for good is too
(``memory_store.files._outboxfiles`` keeps the names), or once it waited past ``[media]
retention_days``: a file whose event is dead-lettered stays for ``dead retry`` until then.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from channels.base import Channel
from channels.errors import MaybeSent, PermanentError, TransientError
from channels.models import Outbound, group_key
from gateway.intake._groupfiles import GroupFiles
from gateway.outgoing._delivery import DeliveryRecorder, chunk_report
from gateway.outgoing._ratelimit import RateLimiter
from gateway.queue import Keys, events
from memory_store.files import outboxfiles

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
            await self._outcomes.record(chunk_report(msg, 0, False, err.reason), mark_sent=True)
            return await self._note(channel, msg, name, err.reason)
        except MaybeSent as err:
            log.warning("outbox: %s file of reply %s may have been delivered (%s); "
                        "asking the platform", channel.name, msg.reply_id, err)
            found = await self._found(channel, msg)
            if found is None:
                return False  # the retry sends again (the platform may dedupe it)
            platform_id = found
        except TransientError as err:
            log.warning("outbox: %s file of reply %s failed (%s); will retry", channel.name,
                        msg.reply_id, err)
            return False
        await self._outcomes.record(chunk_report(msg, 0, True, platform_id or "sent"),
                                    mark_sent=True)
        return True

    @staticmethod
    async def _found(channel: Channel, msg: Outbound) -> str | None:
        try:
            return await channel.find_sent(msg, 0)
        except TransientError as err:
            log.warning("outbox: could not look file of reply %s up (%s)", msg.reply_id, err)
            return None

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


async def prune_sent_files(client: aioredis.Redis, keys: Keys, files: GroupFiles,
                           retention_days: float, now: float | None = None) -> list[str]:
    """Delete the stored files no send waits for (see the module's docstring); returns
    ``<group>/<sha256>`` of each deleted. One EXISTS per file, hourly."""
    cutoff = (time.time() if now is None else now) - retention_days * 86400
    removed: list[str] = []
    for group, folder in await asyncio.to_thread(files.chats_with, events.FILES_FOLDER):
        for seen in await asyncio.to_thread(outboxfiles.listing, folder):
            sent = bool(seen.refs) and await client.exists(
                *(keys.sent(ref, 0) for ref in seen.refs)) == len(seen.refs)
            expired = retention_days > 0 and seen.stored_at < cutoff
            if (sent or expired) and await asyncio.to_thread(outboxfiles.remove, folder, seen):
                removed.append(f"{group}/{seen.sha256}")
    return removed

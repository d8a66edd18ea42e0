"""The media job: the gateway task that downloads the files of held messages, then lets
the messages on to their mailbox (``gateway.queue.media`` holds them, in order).

It runs in the gateway because the download needs the channel's token. Each group is
drained by one task at a time, head first: fetch and store every attachment
(``gateway.media.fetch``), tell the sender once about a file refused by a cap or its
type (a reply whose id derives from the message's dedupe id, so a redo after a crash
sends nothing twice; a file the platform would not give is only noted for the model),
have stored voice notes transcribed (``gateway.media.voice``), push the message with its
attachments' ``stored``/``refused``/``transcript`` filled in, release it.
The inbox ``wake``s it for a new hold; a restart finds what a killed gateway left.
Once an hour it also deletes files past ``[media] retention_days``, and the files the
outbox is done sending (``gateway.outgoing._filesend.prune_sent_files``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

import redis
import redis.asyncio as aioredis
from pydantic import ValidationError

import gateway.outgoing._filesend as filesend
from channels.base import Channel
from channels.models import Attachment, Inbound, Outbound
from gateway import wait_any
from gateway.config import Settings
from gateway.intake._groupfiles import GroupFiles
from gateway.media.fetch import DOWNLOAD_FAILED, fetch_one
from gateway.media.store import Received
from gateway.media.voice import transcribe_all
from gateway.queue import Keys, events
from gateway.queue.media import Held, MediaHold
from memory_store.files import ATTACHMENTS_FOLDER
from memory_store.files import attachments as files

log = logging.getLogger(__name__)

#: ``(group, message, disposition) -> outcome``: the inbox's push past the hold
Push = Callable[[str, Inbound, str], Awaitable[str]]
#: seconds between two looks for held groups when nobody wakes the job
IDLE_POLL = 2.0
#: seconds between two retention sweeps
EXPIRE_EVERY = 3600.0


def refusal_reply_id(msg: Inbound) -> str:
    return "media-" + hashlib.sha256(msg.dedupe_id.encode()).hexdigest()[:32]


def refusal_text(refused: list[Attachment]) -> str:
    parts = []
    for att in refused:
        what = f'"{att.name[:60]}"' if att.name else f"your {att.type}"
        parts.append(f"I couldn't take {what}: {att.refused}.")
    return " ".join(parts)


class MediaJob:
    def __init__(self, config: Settings, client: aioredis.Redis, keys: Keys,
                 channels: Mapping[tuple[str, str], Channel], push: Push,
                 wake: asyncio.Event | None = None, jobs: redis.Redis | None = None) -> None:
        self._cfg = config
        self._r = client
        self._keys = keys
        self._channels = channels
        self._push = push
        #: where transcriptions are queued (RQ needs a blocking client); None: none are
        self._jobs = jobs
        self.hold = MediaHold(client, keys)
        self.files = GroupFiles.of(config)
        self.wake = wake or asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._expired = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Drain every holding group until ``stop`` is set."""
        try:
            while not stop.is_set():
                self.wake.clear()
                try:
                    await self.start_groups()
                    if time.monotonic() - self._expired >= EXPIRE_EVERY:
                        self._expired = time.monotonic()
                        await asyncio.to_thread(self.expire)
                        # files sent ones waited for: the outbox's, swept here too
                        await filesend.prune_sent_files(self._r, self._keys, self.files,
                                                        self._cfg.media.retention_days)
                except (redis.RedisError, OSError) as err:
                    log.warning("media job: %s; retrying", err)
                await wait_any(IDLE_POLL, stop, self.wake)
        finally:
            for task in self._running.values():
                task.cancel()  # its entry stays at the head: the next start redoes it

    async def start_groups(self) -> None:
        self._running = {g: t for g, t in self._running.items() if not t.done()}
        for group in await self.hold.groups():
            if group not in self._running:  # a group's done task was dropped just above
                self._running[group] = asyncio.create_task(self._drain_logged(group),
                                                           name=f"media {group}")

    async def _drain_logged(self, group: str) -> None:
        try:
            await self.drain(group)
        except (redis.RedisError, OSError) as err:
            log.warning("media job for %s: %s; retrying", group, err)
        except Exception:
            log.exception("media job for %s failed; retrying", group)

    async def drain(self, group: str) -> None:
        """Download, push and release the group's held messages, head first."""
        while (held := await self.hold.head(group)) is not None:
            msg = self._message(group, held)
            if msg is not None and not await self._deleted(group, msg):
                # only a message addressed to the bot is answered about its files: a
                # group's passing chatter gets no "couldn't take" replies
                msg = await self.fetch_all(group, msg, tell=held.disposition == "engage")
                if self._jobs is not None:
                    msg = await transcribe_all(self._cfg, self._jobs,
                                               self.files.attachments(group), group, msg)
                if not await self._deleted(group, msg):  # deleted while downloading
                    await self._push(group, msg, held.disposition)
            if not await self.hold.release(group, held):
                return

    async def _deleted(self, group: str, msg: Inbound) -> bool:
        """Deleted on its platform while held: never pushed, its files removed."""
        if not await self.hold.was_deleted(group, msg.account, msg.message_id):
            return False
        log.info("held message %s in %s was deleted; dropped", msg.message_id, group)
        gd = self.files.existing(group)
        if gd is not None:
            await asyncio.to_thread(files.forget_messages, gd, [msg.message_id])
        return True

    def _message(self, group: str, held: Held) -> Inbound | None:
        try:
            return Inbound.model_validate(held.msg)
        except ValidationError as err:
            log.error("dropping a malformed held message in %s: %s", group, err)
            return None

    async def fetch_all(self, group: str, msg: Inbound, *, tell: bool = True) -> Inbound:
        """``msg`` with each attachment stored or refused; with ``tell``, tells the
        sender once about the refused ones."""
        channel = self._channels.get((msg.channel, msg.account))
        out: list[Attachment] = []
        for att in msg.attachments:
            if att.stored is None and att.refused is None:
                came = Received(msg.channel, msg.message_id, att.name,
                                msg.received_at.timestamp())
                att = await fetch_one(self._cfg.media, self.files, group, channel, att, came)
            out.append(att)
        refused = [a for a in out if a.refused and a.refused != DOWNLOAD_FAILED]
        if refused and tell:
            await self._tell(msg, refused)
        return msg.model_copy(update={"attachments": out})

    async def _tell(self, msg: Inbound, refused: list[Attachment]) -> None:
        out = Outbound(channel=msg.channel, account=msg.account, chat_id=msg.chat_id,
                       thread_id=msg.thread_id, text=refusal_text(refused),
                       reply_to_id=msg.message_id, reply_id=refusal_reply_id(msg))
        await self._r.xadd(self._keys.outbox, events.reply(out).fields())  # type: ignore[arg-type]

    def expire(self) -> list[str]:
        """Delete files past ``[media] retention_days`` in every group."""
        days = self._cfg.media.retention_days
        removed: list[str] = []
        if days > 0:
            for _, path in self.files.chats_with(ATTACHMENTS_FOLDER):
                removed += files.expire(path, days)
        return removed

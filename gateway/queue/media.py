"""Messages held for their attachments: the inbox holds a message with files (and any
message of the same group behind it) here instead of pushing it to the mailbox; the
gateway's media job downloads the files, then pushes the head into the mailbox and
releases it. The turn so sees each file already stored, and the group's order is kept.

State of one held entry::

    intake (a message without files: push.lua pushes it unless mediahold:{g} is
            non-empty, BEHIND_HOLD; then, or for one with files,
            media_hold.lua: dedupe SET NX, RPUSH mediahold:{g}, SADD mediagroups)
      --> head of mediahold:{g} --download, push to mailbox (deduped)--> released
          (media_release.lua: LPOP if still the head, SREM when the list empties)

A gateway killed anywhere in between finds the entry at the head again on restart and
does it again: the store is content-addressed and the push deduped, so nothing doubles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.queue.events import as_str
from gateway.queue.keys import Keys
from gateway.queue.scripts import Scripts

#: ``hold`` results
HELD_DUPLICATE = -1
NOT_HELD = 0
HELD = 1


@dataclass(frozen=True)
class Held:
    raw: str  # the entry as stored (what ``release`` compares)
    msg: dict[str, Any]  # ``Inbound`` as JSON
    disposition: str  # "engage" or "context"


class MediaHold:
    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._s = Scripts(client)

    async def hold(self, group: str, dedupe_key: str, msg_json: str, disposition: str, *,
                   has_files: bool, dedupe_ttl: int) -> int:
        """Hold a message (``has_files``: whatever the group holds; the inbox also
        passes it for one ``push`` found behind held ones) or one arriving behind a held
        one; dedupes it by ``dedupe_key`` when held. ``HELD_DUPLICATE``, ``NOT_HELD`` or
        ``HELD``."""
        entry = json.dumps({"msg": json.loads(msg_json), "disposition": disposition})
        return int(await self._s["media_hold"](
            keys=[dedupe_key, self.keys.media_hold(group), self.keys.media_groups],
            args=[dedupe_ttl, entry, group, "1" if has_files else "0"]))

    async def groups(self) -> list[str]:
        return sorted(as_str(g) for g in await self.r.smembers(self.keys.media_groups))

    async def head(self, group: str) -> Held | None:
        raw = await self.r.lindex(self.keys.media_hold(group), 0)
        if raw is None:
            return None
        text = as_str(raw)
        data = json.loads(text)
        return Held(text, data["msg"], str(data.get("disposition", "engage")))

    async def note_deleted(self, group: str, account: str, message_id: str, ttl: int
                           ) -> None:
        """A deletion of ``message_id`` arrived: if the group holds messages it may be
        one of them, which must then never reach a turn."""
        if await self.r.llen(self.keys.media_hold(group)):
            key = self.keys.media_deleted(group)
            await self.r.sadd(key, f"{account}:{message_id}")
            await self.r.expire(key, ttl)

    async def was_deleted(self, group: str, account: str, message_id: str) -> bool:
        return bool(await self.r.sismember(self.keys.media_deleted(group),
                                           f"{account}:{message_id}"))

    async def release(self, group: str, held: Held) -> bool:
        """Drop ``held`` from the head; True while the group holds more."""
        return bool(await self._s["media_release"](
            keys=[self.keys.media_hold(group), self.keys.media_groups],
            args=[held.raw, group]))

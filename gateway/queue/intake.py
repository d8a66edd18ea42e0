"""The gateway's side of the queue, on an async client: accept a message into its
group's mailbox, heal groups whose drain job died, ack outbox entries, pace sends."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.queue.keys import OUTBOX_GROUP, Keys
from gateway.queue.scripts import Scripts

#: ``push`` results
DUPLICATE = -1
KEPT = 0
KEPT_ENQUEUE = 1


class GatewayQueue:
    """Typed wrappers of the gateway's scripts."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._s = Scripts(client)

    async def push(self, group: str, dedupe_id: str, entry: str, *, engaged: bool,
                   dedupe_ttl: int, lease_ttl_ms: int, job_id: str) -> int:
        """Dedupe and append ``entry`` to the group's mailbox (engaged) or context list;
        for an engaged message take the lease for ``job_id`` if there is none.
        ``DUPLICATE``, ``KEPT``, or ``KEPT_ENQUEUE`` (the caller enqueues ``job_id``)."""
        k = self.keys
        target = k.mailbox(group) if engaged else k.context(group)
        return int(await self._s["push"](
            keys=[k.dedupe(dedupe_id), k.seq(group), target, k.lease(group), k.active],
            args=[dedupe_ttl, entry, "1" if engaged else "0", lease_ttl_ms, group, job_id]))

    async def sweep(self, group: str, lease_ttl_ms: int, job_id: str) -> bool:
        """Take the lease of ``group`` for ``job_id`` if work waits and no job holds it
        (then the caller enqueues it); drop a group with nothing waiting from ``active``."""
        k = self.keys
        return int(await self._s["sweep"](
            keys=[k.mailbox(group), k.processing(group), k.lease(group), k.active],
            args=[lease_ttl_ms, job_id, group])) == 1

    async def active_groups(self) -> list[str]:
        return [_str(g) for g in await self.r.smembers(self.keys.active)]  # type: ignore[misc]

    async def lease(self, group: str) -> tuple[str | None, int]:
        """(job id the lease stands for, ms left), or (None, -2)."""
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.lease(group))
            pipe.pttl(self.keys.lease(group))
            value, left = await pipe.execute()
        return (None, -2) if value is None else (_str(value), int(left))

    async def extend_lease(self, group: str, ttl_ms: int) -> None:
        await self.r.pexpire(self.keys.lease(group), ttl_ms)

    async def outbox_ack(self, entry_ids: list[str]) -> None:
        """Ack and delete handled outbox entries (at most a few hundred per call)."""
        await self._s["outbox_ack"](keys=[self.keys.outbox], args=[OUTBOX_GROUP, *entry_ids])

    async def rate_wait_ms(self, channel: str, chat_id: str, interval_ms: int, burst: int
                           ) -> int:
        """0 if a send to the chat may go now (recorded), else the ms to wait."""
        return int(await self._s["gcra"](keys=[self.keys.rate(channel, chat_id)],
                                          args=[interval_ms, burst]))


def as_str(value: Any) -> str:
    """A reply as ``str`` whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


_str = as_str

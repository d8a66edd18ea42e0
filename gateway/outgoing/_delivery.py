"""Delivery outcomes: what became of every reply chunk, recorded in Redis.

The outbox records each chunk it finished with (delivered with the platform's message
id, or failed for good with the reason); adapters that learn an outcome later (a
WhatsApp ``failed`` status arriving by webhook) report it through the ``OutcomeSink``
seam (``Channel.bind_outcomes``), which is ``DeliveryRecorder.record``. A failure marks
the group's reply undelivered, and the worker puts a short note in the next turn's
prompt (workers/delivery_note.py) so the agent never assumes it was heard. Counts per
channel are shown on ``/healthz``.
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis

from channels.base import DeliveryReport
from channels.models import Outbound, group_key
from gateway.queue import GatewayQueue, Keys

log = logging.getLogger(__name__)

#: how long an outcome is kept (as long as the outbox's sent marks)
OUTCOME_TTL = 7 * 24 * 3600


def chunk_report(msg: Outbound, index: int, delivered: bool, detail: str) -> DeliveryReport:
    """The outcome of chunk ``index`` of ``msg`` (a file is chunk 0)."""
    return DeliveryReport(channel=msg.channel, account=msg.account, chat_id=msg.chat_id,
                          reply_id=msg.reply_id, index=index, delivered=delivered,
                          detail=detail)


class DeliveryRecorder:
    """Writes delivery outcomes (``gateway/queue/lua/outcome.lua``) and reads counts."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._q = GatewayQueue(client, keys)

    async def record(self, report: DeliveryReport, *, mark_sent: bool = False) -> None:
        """Record one chunk's outcome; raises ``redis.RedisError`` when it could not be."""
        fresh = await self._q.record_outcome(
            group_key(report.channel, report.chat_id), report.channel, report.reply_id,
            report.index, delivered=report.delivered, detail=report.detail,
            ttl=OUTCOME_TTL, now=int(time.time()), mark_sent=mark_sent)
        if fresh and not report.delivered:
            log.error("delivery failed for good: %s chunk %d of reply %s to %s: %s",
                      report.channel, report.index, report.reply_id, report.chat_id,
                      report.detail)

    async def count_ambiguous(self, channel: str) -> None:
        """One more send of ``channel`` that failed after it may have reached the
        platform (``channels.errors.MaybeSent``); raises ``redis.RedisError``."""
        await self._q.count_delivery(channel, "ambiguous")

    async def outcome(self, reply_id: str) -> dict[int, tuple[str, str]]:
        """Chunk index -> (``delivered`` | ``failed``, platform id | reason)."""
        return await self._q.outcome(reply_id)

    async def counts(self) -> dict[str, int]:
        """``{channel}:delivered`` / ``{channel}:failed`` -> chunks, across gateways."""
        return await self._q.delivery_counts()

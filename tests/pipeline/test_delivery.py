"""The delivery-outcome record (gateway/outgoing/_delivery.py, outcome.lua) on a real Valkey."""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

from channels.base import DeliveryReport
from gateway.outgoing import DeliveryRecorder
from gateway.queue import GroupQueue, Keys
from tests.pipeline.conftest import Valkey
from workers.prompt import undelivered_note


def report(reply_id: str, index: int, delivered: bool, detail: str) -> DeliveryReport:
    return DeliveryReport(channel="whatsapp", account="default", chat_id="491", index=index,
                          reply_id=reply_id, delivered=delivered, detail=detail)


async def test_outcomes_mark_and_clear_the_groups_undelivered_reply(valkey: Valkey) -> None:
    r = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    sync = redis.Redis.from_url(valkey.url)
    rec = DeliveryRecorder(r, Keys())
    group = GroupQueue(sync, Keys(), "whatsapp:491")
    try:
        await rec.record(report("t1", 0, True, "wamid.A"), mark_sent=True)
        await rec.record(report("t1", 1, True, "wamid.B"), mark_sent=True)
        assert group.undelivered() == {}
        assert await r.get("pnc:sent:t1:1") == "wamid.B"
        # a late webhook: chunk 1 failed after all; reported twice, counted once
        await rec.record(report("t1", 1, False, "131047 window closed"))
        await rec.record(report("t1", 1, False, "131047 window closed"))
        assert await rec.outcome("t1") == {0: ("delivered", "wamid.A"),
                                           1: ("failed", "131047 window closed")}
        mark = group.undelivered()
        assert (mark["reply_id"], mark["reason"]) == ("t1", "131047 window closed")
        note = undelivered_note(mark)
        assert note is not None and "NOT delivered (131047 window closed)" in note
        # another chunk of the same reply arriving does not hide the failure...
        await rec.record(report("t1", 2, True, "wamid.C"))
        assert group.undelivered()["reply_id"] == "t1"
        # ...a later reply getting through does
        await rec.record(report("t2", 0, True, "wamid.D"), mark_sent=True)
        assert group.undelivered() == {} and undelivered_note({}) is None
        assert await rec.counts() == {"whatsapp:delivered": 4, "whatsapp:failed": 1}
    finally:
        await r.aclose()
        sync.close()

"""The local channel's protocol (JSON pushed to a Redis list) against a 100,000-deep
array: skipped with a log line, nothing stuck in flight, the next message delivered.
Real Valkey, the real channel loop."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import redis.asyncio as aioredis

from channels.local import LocalChannel
from channels.models import Inbound
from tests.pipeline.conftest import Valkey

DEEP = "[" * 100_000 + "]" * 100_000


async def test_a_deep_message_is_skipped_and_the_channel_keeps_receiving(
    valkey: Valkey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.local")
    got: list[Inbound] = []

    async def sink(msg: Inbound) -> None:
        got.append(msg)

    channel = LocalChannel(valkey.url)
    r = aioredis.Redis.from_url(valkey.url)
    good = {"chat_id": "c", "sender_id": "u", "message_id": "m1", "text": "still here"}
    deep_field = json.dumps(good)[:-1] + ', "extra": ' + DEEP + "}"
    await r.rpush(channel.keys.inbox, DEEP, deep_field, json.dumps(good))
    await channel.start(sink)
    try:
        for _ in range(200):  # bounded: 10 s
            if got:
                break
            await asyncio.sleep(0.05)
    finally:
        await channel.stop()
    assert [m.text for m in got] == ["still here"]
    assert await r.llen(channel.keys.inflight) == 0
    assert await r.llen(channel.keys.inbox) == 0
    skipped = [r.getMessage() for r in caplog.records if "skipped a message" in r.getMessage()]
    assert len(skipped) == 2
    await r.aclose()

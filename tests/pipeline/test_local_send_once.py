"""The local channel appends a reply chunk to its chat's stream once per (reply id,
index), as Matrix dedupes a transaction id: the outbox marks a chunk sent only after
``send_chunk`` returned, so a Redis that dies in between (the embedded server
SIGKILLed) made the retried send show the chunk twice. Real Valkey."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from channels.base import Chunk
from channels.local import LocalChannel
from channels.models import Outbound
from tests.pipeline.conftest import Valkey


def reply(reply_id: str) -> Outbound:
    return Outbound(channel="local", account="default", chat_id="ada", reply_id=reply_id,
                    text="hello there")


async def test_a_resent_chunk_is_appended_once(valkey: Valkey) -> None:
    channel = LocalChannel(valkey.url)
    r = aioredis.Redis.from_url(valkey.url, decode_responses=True)
    try:
        chunk = Chunk(text="hello there", plain="hello there", formatted=False)
        first = await channel.send_chunk(reply("r1"), chunk, 0)
        again = await channel.send_chunk(reply("r1"), chunk, 0)
        other_index = await channel.send_chunk(reply("r1"), chunk, 1)
        other_reply = await channel.send_chunk(reply("r2"), chunk, 0)
        entries = await r.xrange(channel.keys.out("ada"))
        chunks = [(f["reply_id"], f["index"]) for _, f in entries if f["type"] == "chunk"]
        assert chunks == [("r1", "0"), ("r1", "1"), ("r2", "0")]
        assert first == entries[0][0] and again == "sent"
        assert len({first, other_index, other_reply}) == 3
    finally:
        await r.aclose()
        await channel.stop()


async def test_concurrent_senders_of_one_chunk_append_it_once(valkey: Valkey) -> None:
    channels = [LocalChannel(valkey.url) for _ in range(8)]
    chunk = Chunk(text="once", plain="once", formatted=False)
    try:
        await asyncio.gather(*(c.send_chunk(reply("r9"), chunk, 0) for c in channels))
        r = aioredis.Redis.from_url(valkey.url, decode_responses=True)
        entries = await r.xrange(channels[0].keys.out("ada"))
        await r.aclose()
        assert [f["reply_id"] for _, f in entries if f["type"] == "chunk"] == ["r9"]
    finally:
        for c in channels:
            await c.stop()

"""Keep-alive races (issue 30): the fake closes a keep-alive connection once it has been
idle ``IDLE`` seconds, without the client hearing of it, and resets the next request on
it unanswered. Our pools (``channels.pools``) drop idle connections sooner, so a send
after such a pause goes out on a fresh connection: delivered, nothing ambiguous. With
the libraries' defaults (httpx 5 s, aiohttp 15 s) the same send is reset: ``MaybeSent``.
One httpx-based adapter (Telegram, through PTB) and one aiohttp-based (Signal)."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from channels.pools import KEEPALIVE_EXPIRY
from channels.signal.normalize import GROUP_PREFIX
from tests.channels import test_ambiguous_send as ambiguous
from tests.channels.harness_signal import GROUP_ID as SIGNAL_GROUP
from tests.channels.harness_signal import signal_harness
from tests.channels.harness_telegram import GROUP_ID, telegram_harness
from tests.channels.test_ambiguous_send import outbox_for, reply

# the Valkey and Redis client fixtures of the outbox tests
valkey = ambiguous.valkey
r = ambiguous.r

#: the fake's idle timeout: above ours, below httpx's (5 s) and aiohttp's (15 s) defaults
IDLE = 3.0


def test_the_fakes_idle_timeout_sits_between_ours_and_the_defaults() -> None:
    assert KEEPALIVE_EXPIRY < IDLE < 5.0


async def test_telegram_sends_after_an_idle_pause_without_ambiguity(
    r: aioredis.Redis
) -> None:
    async with telegram_harness() as h:
        h.fake.idle.seconds = IDLE
        ob = outbox_for(r, h.channel)
        assert await ob.handle(reply("telegram", str(GROUP_ID), "first", "rk-1")) is True
        await asyncio.sleep(IDLE + 0.5)  # the server let the pooled connection go
        assert await ob.handle(reply("telegram", str(GROUP_ID), "second", "rk-2")) is True
        assert [m["text"] for m in h.fake.sent] == ["first", "second"]
        assert ob.stats.ambiguous == 0 and h.fake.idle.resets == 0


async def test_signal_sends_after_an_idle_pause_without_ambiguity(
    r: aioredis.Redis
) -> None:
    async with signal_harness() as h:
        h.fake.idle.seconds = IDLE
        ob = outbox_for(r, h.channel)
        chat = GROUP_PREFIX + SIGNAL_GROUP
        assert await ob.handle(reply("signal", chat, "first", "rk-3")) is True
        await asyncio.sleep(IDLE + 0.5)
        assert await ob.handle(reply("signal", chat, "second", "rk-4")) is True
        assert [m["message"] for m in h.fake.sent] == ["first", "second"]
        assert ob.stats.ambiguous == 0 and h.fake.idle.resets == 0

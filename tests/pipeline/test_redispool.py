"""The gateway's Redis pool: sized from the webhook concurrency the config allows, and
waiting for a free connection instead of failing (issue 30: 503s from
``MaxConnectionsError`` with 128 webhook requests in flight, Redis idle)."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from channels.telegram import TelegramChannel
from gateway.operations import redispool
from tests.channels.harness_telegram import block, env
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline.conftest import Stack, Valkey


def telegram(mode: str, concurrency: int) -> TelegramChannel:
    config = block(FakeTelegram(), mode=mode, webhook_max_connections=concurrency,
                   webhook_url="https://bot.example.org/telegram/webhook")
    return TelegramChannel.from_config("default", config, env())


def test_the_pool_grows_by_each_webhooks_configured_concurrency() -> None:
    hooked, polling = telegram("webhook", 100), telegram("polling", 100)
    assert redispool.pool_size([hooked, polling]) == redispool.BASE_CONNECTIONS + 100
    assert redispool.pool_size([polling]) == redispool.BASE_CONNECTIONS


async def test_more_commands_than_connections_wait_instead_of_failing(valkey: Valkey) -> None:
    client = redispool.connect(valkey.url, [], base=2)
    try:
        # each BLPOP holds its connection until its timeout: 20 of them on 2 connections
        results = await asyncio.gather(*(client.blpop([f"empty:{i}"], timeout=0.05)
                                         for i in range(20)))
        assert results == [None] * 20
    finally:
        await client.aclose()


async def test_the_gateway_uses_the_sized_blocking_pool(stack: Stack) -> None:
    gateway = await stack.start_gateway()
    assert gateway.r is not None
    pool = gateway.r.connection_pool
    assert isinstance(pool, aioredis.BlockingConnectionPool)
    assert pool.max_connections == redispool.BASE_CONNECTIONS  # the local channel: no webhook

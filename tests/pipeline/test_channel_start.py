"""One channel that cannot start never takes the gateway down: Telegram's API answering
5xx at start is retried in the background while the local channel answers; a refused
token is ``failed`` in ``/healthz`` with one line naming its environment variable, and
``pynanoclaw status`` fails on it. Real Valkey, a worker process, the real
python-telegram-bot against the local fake Bot API."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.app import Gateway
from gateway.config import load_config
from gateway.operations import LocalClient, status_checks
from tests.channels.harness_telegram import env as telegram_env
from tests.fakes.telegram_api import BOT_TOKEN, FakeTelegram, failure_for
from tests.pipeline.conftest import Stack, Valkey


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    f = FakeTelegram()
    await f.start()
    yield f
    await f.stop()


def telegram_block(fake: FakeTelegram) -> str:
    return (f'[channels.telegram]\nbase_url = "{fake.base_url}"\n'
            f'base_file_url = "{fake.base_file_url}"\npoll_timeout = 1\n')


async def start(stack: Stack, env: dict[str, str]) -> Gateway:
    stack.config = load_config(stack.config_path)
    gw = Gateway(stack.config, stack.valkey.url, env={**os.environ, **env},
                 consumer="test-gateway")
    stack.gateway = gw
    await gw.start()  # returns although Telegram did not start
    stack.client = LocalClient(stack.valkey.url)
    return gw


async def test_a_platform_down_at_start_is_retried_while_local_answers(
    tmp_path: Path, valkey: Valkey, fake: FakeTelegram
) -> None:
    for _ in range(3):
        fake.fail_next("getMe", failure_for(502))
    stack = Stack(tmp_path, valkey, telegram_block(fake))
    try:
        stack.start_workers(1)
        gw = await start(stack, telegram_env())
        health = await gw.health()
        status = health["channel_status"]["telegram:default"]
        assert status["start"] == "retrying" and "502" not in BOT_TOKEN
        # up (200: not restarted by a health check) but not ok, naming the channel
        assert health["up"] and not health["ok"]
        assert [d for d in health["degraded"] if d.startswith("channel telegram:default: "
                                                               "retrying")]
        assert BOT_TOKEN not in str(status)
        ex = await stack.ask("ada", "ada", "hello", timeout=60)
        assert ex.reply is not None and ex.reply.startswith("ack ")

        async def running() -> bool:
            return (await gw.health())["channel_status"]["telegram:default"]["start"] \
                == "running"

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not await running():
            assert loop.time() < deadline, "telegram never started"
            await asyncio.sleep(0.2)
        assert gw.starters[("telegram", "default")].attempts == 4
        os.environ["TELEGRAM_BOT_TOKEN"] = BOT_TOKEN
        try:
            checks = await asyncio.to_thread(
                lambda: list(status_checks(stack.config_path, model=False)))
        finally:
            del os.environ["TELEGRAM_BOT_TOKEN"]
        tg = {c.name: c for c in checks}["channel telegram:default"]
        assert tg.ok and "@claw_bot" in tg.detail
    finally:
        await stack.close()


async def test_a_refused_token_is_reported_and_the_others_run(
    tmp_path: Path, valkey: Valkey, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "7000000001:AAwrong-token-wrong-token-wrong-token"
    stack = Stack(tmp_path, valkey, telegram_block(fake))
    try:
        stack.start_workers(1)
        gw = await start(stack, {**telegram_env(), "TELEGRAM_BOT_TOKEN": wrong})
        health = await gw.health()
        status = health["channel_status"]["telegram:default"]
        assert status["start"] == "failed"
        assert "TELEGRAM_BOT_TOKEN" in status["error"] and "\n" not in status["error"]
        assert wrong not in str(health) and wrong not in caplog.text
        assert "Traceback" not in caplog.text
        ex = await stack.ask("ada", "ada", "hello", timeout=60)
        assert ex.reply is not None and ex.reply.startswith("ack ")
        # `pynanoclaw status` asks Telegram (getMe) and names the variable
        os.environ["TELEGRAM_BOT_TOKEN"] = wrong
        try:
            checks = await asyncio.to_thread(
                lambda: list(status_checks(stack.config_path, model=False)))
        finally:
            del os.environ["TELEGRAM_BOT_TOKEN"]
        by_name = {c.name: c for c in checks}
        tg = by_name["channel telegram:default"]
        assert not tg.ok and "TELEGRAM_BOT_TOKEN" in tg.detail and wrong not in tg.detail
        assert by_name["channel local:default"].ok
        assert by_name["workers"].ok and by_name["redis"].ok
    finally:
        await stack.close()

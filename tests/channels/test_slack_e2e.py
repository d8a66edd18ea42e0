"""End to end: fake Slack (Socket Mode) -> real Bolt/slack_sdk -> gateway inbox (real
Valkey) -> a real worker process (scripted model) -> outbox -> chat.postMessage -> fake
Slack; then the message's deletion (``message_deleted``) and its redaction."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest

from tests.channels.e2e import GatewayStack, running
from tests.channels.kit import load_fixture
from tests.channels.redaction_check import files_holding, keys_holding, wait_redacted
from tests.fakes.slack_api import FakeSlack, channel_env, message_event

pytestmark = pytest.mark.slow

DM = "D0ALICE001"


async def _until(predicate: object, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 90
    while not predicate():  # type: ignore[operator]
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_deleted_message_leaves_memory_and_redis(tmp_path: Path) -> None:
    """Alice's DM is answered with a reply quoting part of it, then she deletes it:
    none of its words stays in any file of the data directory or any Redis key."""
    fake = FakeSlack()
    await fake.start()
    try:
        tables = (f'\n[channels.slack]\nmode = "socket"\napi_base_url = "{fake.base_url}"\n'
                  "ping_interval = 1.0\n")
        async with running(GatewayStack(channel_env(), "slack-e2e"), tmp_path,
                           tables) as stack:
            await fake.wait_connected()
            text = "hello MARK-sk1, my locker combination echo[MARK-sk1 combination]"
            ts = "1700000101.000100"
            await fake.push_event(message_event(text, channel=DM, ts=ts, channel_type="im"))
            await _until(lambda: bool(fake.posted), "the reply")
            assert "SEEN: MARK-sk1 combination" in fake.posted[0]["text"]
            data = tmp_path / "data"
            await _until(lambda: bool(files_holding(data, "MARK-sk1")), "the episode")
            gone = copy.deepcopy(load_fixture("slack", "message_deleted")["event"])
            gone.update(channel=DM, channel_type="im", deleted_ts=ts,
                        ts="1700000111.000200", event_ts="1700000111.000200")
            gone["previous_message"].update(text=text, ts=ts)
            await fake.push_event(gone)
            await wait_redacted(data)
            for word in ("MARK-sk1", "combination"):
                assert files_holding(data, word) == [], word
                assert keys_holding(stack.valkey_url, word) == set(), word
    finally:
        await fake.stop()

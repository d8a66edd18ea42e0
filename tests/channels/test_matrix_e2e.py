"""End to end against a REAL Synapse: a human (a real nio client) -> Synapse -> the bot's
MatrixChannel (/sync) -> gateway inbox (real Valkey) -> a real worker process (scripted
model) -> outbox -> MatrixChannel.send_chunk -> Synapse -> the human reads the reply.

Synapse is started once per test run (session fixture, about 5 s; under pytest-xdist once
per worker that runs one of these tests); each test registers its own users, so tests
share nothing but the server.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from channels.matrix import MatrixChannel
from channels.matrix.session import load_session
from channels.models import Outbound
from gateway.app import Gateway
from gateway.config import load_config
from gateway.operations import start_valkey
from tests.channels.matrix_people import Human
from tests.channels.redaction_check import files_holding, keys_holding, wait_redacted
from tests.channels.synapse import Account, SynapseServer, synapse_available

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

_users = itertools.count()


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SynapseServer]:
    if not synapse_available():
        message = ("Synapse is not installed: bash .ci/run installs it into .synapse-venv "
                   "(or point PNC_SYNAPSE_PYTHON at a Python that has matrix-synapse)")
        if os.environ.get("CI"):
            pytest.fail(message)  # CI must run these tests, never skip them
        pytest.skip(message)
    server = SynapseServer(tmp_path_factory.mktemp("synapse"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def valkey_url(tmp_path: Path) -> Iterator[str]:
    server = start_valkey(tmp_path / "redis")  # a port of its own, retried if taken
    try:
        yield f"redis://127.0.0.1:{server.port}"
    finally:
        server.stop()


def _register(synapse: SynapseServer, role: str) -> Account:
    return synapse.register(f"{role}{next(_users)}-{os.getpid()}", f"pw-{role}-Zq81")


class Stack:
    """The bot's gateway (restartable) and a worker process, plus its humans."""

    def __init__(self, synapse: SynapseServer, tmp: Path, valkey_url: str) -> None:
        self.synapse = synapse
        self.tmp = tmp
        self.valkey_url = valkey_url
        self.bot = _register(synapse, "bot")
        self.ann = _register(synapse, "ann")
        self.humans: list[Human] = []
        self.gateway: Gateway | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.config_path = tmp / "pynanoclaw.toml"

    def configure(self, **matrix: object) -> None:
        block = {"homeserver": self.synapse.url, "user_id": self.bot.user_id,
                 "invite_allow": [self.ann.user_id, ":localhost"], "sync_timeout": 2,
                 "backoff_initial": 0.05, "backoff_max": 0.5, **matrix}
        lines = "\n".join(f"{k} = {_toml(v)}" for k, v in block.items())
        self.config_path.write_text(f"""
data_dir = "data"
[redis]
url = "{self.valkey_url}"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[memory]
backend = "file"
[worker]
job_timeout = 120
[channels.matrix]
{lines}
""", encoding="utf-8")

    def human(self, account: Account, *, e2e: bool = False) -> Human:
        person = Human(self.synapse.url, account, self.tmp / "people" / account.user_id, e2e=e2e)
        self.humans.append(person)
        return person

    def start_worker(self) -> None:
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "workers", "--config", str(self.config_path),
             "--redis-url", self.valkey_url, "--worker-class", "simple", "--log-level", "WARNING"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
        )  # fmt: skip

    async def start_gateway(self) -> Gateway:
        env = {"MATRIX_PASSWORD": self.bot.password}
        self.gateway = Gateway(load_config(self.config_path), self.valkey_url, env=env,
                               consumer="matrix-e2e")
        await self.gateway.start()
        return self.gateway

    async def stop_gateway(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None

    @property
    def channel(self) -> MatrixChannel:
        assert self.gateway is not None
        channel = self.gateway.channels[("matrix", "default")]
        assert isinstance(channel, MatrixChannel)
        return channel

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.stop_gateway(), 60)
        except TimeoutError:  # name what hung instead of a bare pytest-timeout
            for task in asyncio.all_tasks():
                task.print_stack()
            raise
        if self.worker is not None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.worker.pid, signal.SIGKILL)
                self.worker.wait()
        for person in self.humans:
            await person.close()


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, int | float):
        return str(value)
    return f'"{value}"'


@pytest.fixture
async def stack(synapse: SynapseServer, tmp_path: Path, valkey_url: str
                ) -> AsyncIterator[Stack]:
    s = Stack(synapse, tmp_path, valkey_url)
    s.configure()
    s.start_worker()
    try:
        yield s
    finally:
        await s.close()


def _thread_of(event: dict[str, object]) -> str | None:
    relates = (event.get("content") or {}).get("m.relates_to") or {}  # type: ignore[union-attr]
    return relates.get("event_id") if relates.get("rel_type") == "m.thread" else None


async def test_group_thread_mention_is_answered_in_the_thread(stack: Stack) -> None:
    bob_account = _register(stack.synapse, "bob")
    await stack.start_gateway()
    ann, bob = stack.human(stack.ann), stack.human(bob_account)
    room = await ann.create_room([stack.bot.user_id, bob_account.user_id], name="Claw testers")
    await ann.wait_joined(room, stack.bot.user_id)  # auto-joined: Ann is allowlisted
    await bob.client.join(room)
    await ann.wait_joined(room, bob_account.user_id)
    root = await ann.say(room, "Here is the plan for friday")  # no mention: context only
    asked = await bob.say(room, "what do you think?", mention=stack.bot.user_id, thread_root=root)
    [reply] = await ann.wait_for_messages(stack.bot.user_id, 1, room)
    content = reply["content"]
    assert _thread_of(reply) == root
    assert content["m.relates_to"]["m.in_reply_to"]["event_id"] == asked
    assert content["m.relates_to"]["is_falling_back"] is False
    assert content["format"] == "org.matrix.custom.html"
    # the scripted model acks the ids its turn saw: the context message and the mention
    assert root in content["body"] and asked in content["body"]


async def test_gateway_restart_between_two_messages_loses_and_repeats_nothing(
    stack: Stack,
) -> None:
    await stack.start_gateway()
    device = stack.channel._client.device_id
    ann = stack.human(stack.ann)
    room = await ann.create_room([stack.bot.user_id])  # Ann and the bot: a DM
    await ann.wait_joined(room, stack.bot.user_id)
    first = await ann.say(room, "first message")
    await ann.wait_for_messages(stack.bot.user_id, 1, room)
    await stack.stop_gateway()
    second = await ann.say(room, "second message, sent while the gateway is down")
    await stack.start_gateway()
    # the same device (and so the homeserver's send dedupe) survives the restart
    assert stack.channel._client.device_id == device
    session = load_session(stack.channel.store_dir, stack.synapse.url, stack.bot.user_id)
    assert session is not None and session.device_id == device
    replies = await ann.wait_for_messages(stack.bot.user_id, 2, room)
    third = await ann.say(room, "third message")  # a replay would be answered before it
    replies = await ann.wait_for_messages(stack.bot.user_id, 3, room)
    targets = [r["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] for r in replies]
    assert targets == [first, second, third]


async def test_retried_send_is_deduplicated_by_synapse(stack: Stack) -> None:
    await stack.start_gateway()
    ann = stack.human(stack.ann)
    room = await ann.create_room([stack.bot.user_id])
    await ann.wait_joined(room, stack.bot.user_id)
    await ann.say(room, "hello")  # answered: the bot's sync has shown it the room
    await ann.wait_for_messages(stack.bot.user_id, 1, room)
    out = Outbound(channel="matrix", chat_id=room, text="**once**", reply_id="turn-retry")
    [chunk] = stack.channel.render(out.text)
    first = await stack.channel.send_chunk(out, chunk, 0)
    again = await stack.channel.send_chunk(out, chunk, 0)  # a retry after a lost answer
    assert first == again
    other = await stack.channel.send_chunk(out, chunk, 1)
    assert other != first
    await ann.wait_for_messages(stack.bot.user_id, 3, room)
    await ann.sync()
    sent = [m["event_id"] for m in ann.messages_from(stack.bot.user_id, room)][1:]
    assert sorted(sent) == sorted({first, other})


async def test_encrypted_room_is_answered_encrypted(stack: Stack) -> None:
    await stack.start_gateway()
    assert stack.channel.encrypted, "matrix-nio's e2e extra should be installed"
    ann = stack.human(stack.ann, e2e=True)
    await ann.sync()
    room = await ann.create_room([stack.bot.user_id], encrypted=True)
    await ann.wait_joined(room, stack.bot.user_id)
    asked = await ann.say(room, "a secret question")
    [reply] = await ann.wait_for_messages(stack.bot.user_id, 1, room)
    # the reply went out encrypted, nio decrypted it for Ann, and it names the question
    assert reply["event_id"] in ann.decrypted
    assert asked in reply["content"]["body"]
    assert reply["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == asked
    store_files = list(stack.channel.store_dir.glob("*.db"))
    assert store_files, "the E2E key store should live under the store dir"


async def test_without_e2e_an_encrypted_room_is_reported_once_and_skipped(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    stack.configure(encryption=False)
    caplog.set_level(logging.INFO, logger="channels.matrix")
    await stack.start_gateway()
    ann = stack.human(stack.ann, e2e=True)
    await ann.sync()
    secret_room = await ann.create_room([stack.bot.user_id], encrypted=True)
    await ann.wait_joined(secret_room, stack.bot.user_id)
    await ann.say(secret_room, "unreadable one")
    await ann.say(secret_room, "unreadable two")
    plain_room = await ann.create_room([stack.bot.user_id])
    await ann.wait_joined(plain_room, stack.bot.user_id)
    asked = await ann.say(plain_room, "can you read this?")
    [reply] = await ann.wait_for_messages(stack.bot.user_id, 1, plain_room)
    assert asked in reply["content"]["body"]  # the loop went on past the encrypted room
    reports = [r for r in caplog.records if "end-to-end encrypted" in r.getMessage()]
    assert len(reports) == 1 and secret_room in reports[0].getMessage()
    assert ann.messages_from(stack.bot.user_id, secret_room) == []
    for record in caplog.records:
        assert stack.bot.password not in record.getMessage()


async def test_a_long_absence_is_read_back_beyond_one_syncs_timeline(stack: Stack) -> None:
    stack.configure(timeline_limit=2)  # one sync carries 2 events; the rest must be read back
    await stack.start_gateway()
    ann = stack.human(stack.ann)
    room = await ann.create_room([stack.bot.user_id])
    await ann.wait_joined(room, stack.bot.user_id)
    await ann.say(room, "before")
    await ann.wait_for_messages(stack.bot.user_id, 1, room)
    await stack.stop_gateway()
    missed = [await ann.say(room, f"missed {i}") for i in range(5)]
    await stack.start_gateway()
    last = await ann.say(room, "after the restart")

    def acked() -> str:
        return " ".join(m["content"]["body"] for m in ann.messages_from(stack.bot.user_id, room))

    while last not in acked():
        await ann.wait_for_messages(stack.bot.user_id, len(ann.messages_from(
            stack.bot.user_id, room)) + 1, room)
    assert all(event_id in acked() for event_id in missed)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_a_redacted_message_leaves_memory_and_redis(stack: Stack, encrypted: bool
                                                          ) -> None:
    """Ann's message is answered with a reply quoting part of it, then she redacts it:
    the m.room.redaction reaches the bot, and none of its words stays in any file of
    the data directory (the bot's reply in the episode and the index included) or any
    Redis key; in an encrypted room too."""
    await stack.start_gateway()
    ann = stack.human(stack.ann, e2e=encrypted)
    await ann.sync()
    room = await ann.create_room([stack.bot.user_id], encrypted=encrypted)
    await ann.wait_joined(room, stack.bot.user_id)
    first = await ann.say(room, "hello MARK-mx1, my locker combination "
                              "echo[MARK-mx1 combination]")
    [reply] = await ann.wait_for_messages(stack.bot.user_id, 1, room)
    assert "SEEN: MARK-mx1 combination" in reply["content"]["body"]
    assert (reply["event_id"] in ann.decrypted) == encrypted
    data = stack.tmp / "data"
    asked = await ann.say(room, "what was MARK-mx1 again?")  # the next turn recalls it
    await ann.wait_for_messages(stack.bot.user_id, 2, room)
    assert files_holding(data, "MARK-mx1") and keys_holding(stack.valkey_url, "MARK-mx1")
    await ann.redact(room, first)
    await wait_redacted(data)
    for word in ("MARK-mx1", "combination"):
        assert files_holding(data, word) == [], word
        assert keys_holding(stack.valkey_url, word) == set(), word
    assert asked and files_holding(data, "again?")  # the later turn stays, minus the word

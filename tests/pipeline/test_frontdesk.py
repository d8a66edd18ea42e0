"""Commands and DM pairing end to end: real Valkey, real worker processes, the gateway,
the local channel; the scripted model records every turn it was asked for."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from channels.models import Inbound
from gateway.intake import PairingStore
from tests.channels.kit import eventually
from tests.pipeline.conftest import ROOT, Stack, Valkey

PAIRING = """
[policy]
dm = "pairing"
admins = ["local:op"]
"""
CODE = re.compile(r"pairing code is ([A-Z0-9]{8})")


@pytest.fixture
async def paired_stack(tmp_path: Path, valkey: Valkey) -> AsyncIterator[Stack]:
    s = Stack(tmp_path, valkey, PAIRING)
    s.start_workers(1)
    await gate_local(s)
    yield s
    await s.close()


async def gate_local(s: Stack) -> None:
    """Start the gateway with the local channel gated like a chat platform (it is the
    operator's console and skips pairing otherwise), so the tests can play a stranger."""
    gateway = await s.start_gateway()
    assert gateway.inbox is not None
    gateway.inbox.front.ungated = frozenset()


def turn_ids(stack: Stack) -> list[str]:
    return [i for t in stack.turns() for i in t["ids"]]


def pair(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "gateway.cli", "pair", *args, "--config",
                           str(stack.config_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


async def test_commands_are_answered_and_never_reach_the_model(stack: Stack) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    who = await stack.ask("ann", "ann", "/whoami", message_id="c1")
    assert who.status == "command"
    assert who.reply == "You are ann (local:ann) in local:ann; your roles here: DM owner, member."
    crew = await stack.ask("crew", "bo", "/forget confirm", group=True, message_id="c2")
    assert crew.status == "command" and crew.reply is not None
    assert crew.reply.startswith("Not allowed: /forget needs one of")
    # an ordinary message right after does get a turn, and the commands were not in it
    plain = await stack.ask("ann", "ann", "hello", message_id="m1")
    assert plain.status == "engage" and plain.reply == "ack m1"
    await stack.settled("local:ann")
    assert turn_ids(stack) == ["m1"]


async def test_an_unknown_command_is_answered_in_a_dm_and_is_a_message_in_a_group(
    stack: Stack,
) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    dm = await stack.ask("ann", "ann", "/frobnicate now", message_id="u1")
    assert dm.status == "command" and dm.reply is not None
    assert dm.reply.startswith("Unknown command /frobnicate. Commands you can use here:")
    # in a group it may be meant for another bot: a message like any other
    group = await stack.ask("crew", "bo", "/frobnicate now", group=True, mention=True,
                            message_id="u2")
    assert group.status == "engage" and group.reply == "ack u2"
    await stack.settled("local:crew")
    assert turn_ids(stack) == ["u2"]


async def test_a_redelivered_command_is_answered_once(stack: Stack) -> None:
    await stack.start_gateway()
    first = await stack.ask("ann", "ann", "/help", message_id="h1")
    again = await stack.ask("ann", "ann", "/help", message_id="h1")
    assert first.status == "command" and again.status == "duplicate"
    assert len([e for e in stack.chat_events("ann") if e.get("type") == "chunk"]) == 1


async def test_pairing_code_then_approval_then_restart(
    paired_stack: Stack, valkey: Valkey
) -> None:
    s = paired_stack
    first = await s.ask("zed", "zed", "hi, who are you?", message_id="p1")
    assert first.status == "pairing" and first.reply is not None
    match = CODE.search(first.reply)
    assert match is not None, first.reply
    code = match.group(1)
    assert f"pynanoclaw pair approve {code}" in first.reply
    # a command from a stranger gets the gate too, not the command
    blocked = await s.ask("zed", "zed", "/whoami", message_id="p2")
    assert blocked.status == "pairing" and code in (blocked.reply or "")

    listed = pair(s, "list")
    assert listed.returncode == 0 and code in listed.stdout and "local:zed" in listed.stdout
    wrong = pair(s, "approve", "WRONGCDE")
    assert wrong.returncode == 1 and "wrong or expired" in wrong.stderr
    still = await s.ask("zed", "zed", "let me in", message_id="p3")
    assert still.status == "pairing"

    ok = pair(s, "approve", code.lower())  # codes are read case-insensitively
    assert ok.returncode == 0, ok.stderr
    through = await s.ask("zed", "zed", "now?", message_id="p4")
    assert through.status == "engage" and through.reply == "ack p4"

    # Redis restarts (AOF), the gateway restarts: the approval holds, the code is spent
    await s.stop_gateway()
    s.kill_workers()
    valkey.stop()
    valkey.start()
    s.start_workers(1)
    await gate_local(s)
    after = await s.ask("zed", "zed", "still me", message_id="p5")
    assert after.status == "engage" and after.reply == "ack p5"
    assert pair(s, "approve", code).returncode == 1
    await s.settled("local:zed")
    assert turn_ids(s) == ["p4", "p5"]  # the model never saw the stranger's DMs


async def test_denied_stranger_gets_nothing_more(paired_stack: Stack) -> None:
    s = paired_stack
    first = await s.ask("eve", "eve", "hello", message_id="d1")
    match = CODE.search(first.reply or "")
    assert match is not None
    assert pair(s, "deny", match.group(1)).returncode == 0
    again = await s.ask("eve", "eve", "please", message_id="d2")
    assert again.status == "pairing" and again.reply is None
    # the operator's own DMs and group messages are not gated
    op = await s.ask("op", "op", "hi", message_id="d3")
    assert op.status == "engage"


async def test_the_local_console_skips_pairing(tmp_path: Path, valkey: Valkey) -> None:
    s = Stack(tmp_path, valkey, PAIRING)
    try:
        s.start_workers(1)
        await s.start_gateway()
        me = await s.ask("me", "me", "hello", message_id="l1")
        assert me.status == "engage" and me.reply == "ack l1"
    finally:
        await s.close()


async def test_an_expired_code_approves_nothing(valkey: Valkey) -> None:
    client = aioredis.Redis.from_url(valkey.url)
    try:
        store = PairingStore(client, "t:", code_ttl=1)
        msg = Inbound(channel="telegram", chat_id="5", is_group=False, sender_id="5",
                      sender_name="Old", message_id="1", text="hi")
        code = await store.request(msg)
        assert code is not None
        assert await store.request(msg) == code  # one live code per person

        async def expired() -> bool:
            return await store.get(code) is None

        await eventually(expired, timeout=10)
        assert await store.approve(code) is None
        assert not await store.is_approved("telegram:5")
        assert await store.request(msg) not in (None, code)  # a fresh code after expiry
    finally:
        await client.aclose()


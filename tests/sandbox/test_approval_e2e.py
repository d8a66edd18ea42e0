"""End to end: ``[tools] approve`` with real workers, a real tool host and its sandbox.

A model's ``run_command`` waits for an admin: the turn's reply names the call and its id;
``/approve <id>`` runs exactly that call once as a new turn whose answer reaches the
chat; a second ``/approve``, a non-admin's, one from another chat, ``/approve`` after
``/deny`` and after the timeout are refused; the timeout tells the chat once.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.pipeline.conftest import Stack, Valkey
from tests.sandbox.approval_model import COUNT
from tests.sandbox.hoststack import tools_stack

CONFIG = """
[policy]
admins = ["local:root"]
[tools]
sandbox = true
approve = ["run_command"]
[tools.groups."local:slow"]
approval_timeout = 1
"""


@pytest.fixture
async def stack(tmp_path: Path, valkey: Valkey) -> AsyncIterator[Stack]:
    async with tools_stack(tmp_path, valkey, "tests.sandbox.approval_model:model", CONFIG) as s:
        yield s


async def ask_count(stack: Stack, chat: str) -> str:
    """Ada asks for the command; the reply names the call and how to approve it."""
    ex = await stack.ask(chat, "ada", "please count", group=True, mention=True, timeout=90)
    assert ex.reply is not None
    found = re.search(r"Waiting for approval ([0-9a-f]{10}): run_command (\{.*\})", ex.reply)
    assert found, ex.reply
    assert found.group(2) == '{"command": "' + COUNT + '"}'
    assert ex.reply.startswith("waiting\n\n") and f"/approve {found.group(1)}" in ex.reply
    return found.group(1)


async def command(stack: Stack, chat: str, user: str, text: str) -> str:
    ex = await stack.ask(chat, user, text, group=True, timeout=30)
    assert ex.status == "command" and ex.reply is not None, ex
    return ex.reply


def said(stack: Stack, chat: str, needle: str) -> list[str]:
    return [e["text"] for e in stack.chat_events(chat)
            if e.get("type") == "chunk" and needle in e["text"]]


def lines_ran(stack: Stack, chat: str) -> int:
    ran = stack.data_dir / "groups/local" / chat / "workspace/ran.txt"
    return len(ran.read_text().splitlines()) if ran.exists() else 0


@pytest.mark.asyncio
async def test_approve_runs_the_recorded_call_once_and_the_answer_arrives(
        stack: Stack) -> None:
    aid = await ask_count(stack, "team")
    assert lines_ran(stack, "team") == 0  # recorded, not run
    assert (await command(stack, "team", "ada", f"/approve {aid}")).startswith(
        "Not allowed: /approve needs one of")
    assert await command(stack, "other", "root", f"/approve {aid}") == \
        f"There is no approval {aid} waiting in this chat."
    assert lines_ran(stack, "team") == 0
    reply = await command(stack, "team", "root", f"/approve {aid}")
    assert reply == f"Approved {aid}: running run_command " + '{"command": "' + COUNT + '"} now.'
    await stack.wait_for(lambda: said(stack, "team", "ran lines="), 90, "the approval turn")
    await stack.settled("local:team")
    assert said(stack, "team", "ran lines=") == ["ran lines=1"]
    # the model saw the output as data from the approved call, at tool trust
    seen = [x.decode() for x in stack.r.lrange("test:approval_returns", 0, -1)]
    assert seen[-1].startswith('<tool_output kind="data" tool="run_command" source="'
                               'run_command {&quot;command&quot;: ')
    assert f'(approval {aid})" trust="0.20" ok="true"' in seen[-1]
    again = await command(stack, "team", "root", f"/approve {aid}")
    assert again.startswith(f"Approval {aid} was already approved and run by root")
    await stack.settled("local:team")
    assert lines_ran(stack, "team") == 1


@pytest.mark.asyncio
async def test_deny_and_timeout_refuse_the_call(stack: Stack) -> None:
    aid = await ask_count(stack, "team")
    assert await command(stack, "team", "root", f"/deny {aid}") == \
        f"Denied {aid}: run_command " + '{"command": "' + COUNT + '"} will not run.'
    assert (await command(stack, "team", "root", f"/approve {aid}")).startswith(
        f"Approval {aid} was already denied by root")
    # the timeout: refused, and the chat told once
    slow = await ask_count(stack, "slow")
    expired = f"Approval {slow} expired: run_command"
    await stack.wait_for(lambda: said(stack, "slow", expired), 30, "the expiry notice")
    assert (await command(stack, "slow", "root", f"/approve {slow}")).startswith(
        f"Approval {slow} was already expired")
    assert len(said(stack, "slow", expired)) == 1
    assert lines_ran(stack, "team") == 0 and lines_ran(stack, "slow") == 0

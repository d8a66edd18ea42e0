"""The tool host runs an approve-marked tool only as the exact call an admin approved,
while its approval turn runs it; an approval moves once; a retried turn does not ask
again for a call decided meanwhile; ``[tools] approve`` is checked at load."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from channels.models import Inbound
from gateway.config import ConfigError, parse_config
from gateway.queue import Keys
from gateway.queue.approvals import Approval, ApprovalStore
from gateway.queue.toolcalls import ToolCall
from gateway.toolhost.host import ToolHost
from gateway.toolhost.sandbox import Sandbox
from tests.pipeline.conftest import Valkey
from workers.approval_ask import notice, request_approval, waiting_text

GROUP = "local:ada"
ARGS = {"command": "echo approved-$((6*7))"}


def _approval(aid: str, group: str = GROUP) -> Approval:
    now = time.time()
    return Approval(id=aid, group=group, tool="run_command", args=ARGS, asked_by="local:ada",
                    turn_id="turn-1", created=now, expires=now + 60, channel="local",
                    account="default", chat_id=group.partition(":")[2], thread_id=None,
                    is_group=True)


def test_only_the_approved_call_runs(tmp_path: Path, valkey: Valkey,
                                     sandbox: Sandbox) -> None:
    settings = parse_config({"data_dir": str(tmp_path / "data"), "tools": {
        "sandbox": True, "approve": ["run_command"]}}, env={})
    client = redis.Redis.from_url(valkey.url)
    client.set(Keys().lock(GROUP), "tok", px=60_000)
    host = ToolHost(settings, client, sandbox=sandbox)
    store = ApprovalStore(client)

    def call(args: dict[str, object], approval: str = "") -> tuple[bool, str]:
        result = asyncio.run(host.handle(ToolCall(GROUP, "turn-2", "tok", "run_command",
                                                  dict(args), time.time() + 20,
                                                  approval=approval)))
        return result.ok, result.error or result.output

    assert call(ARGS) == (False, "refused: run_command needs an admin's approval in the chat")
    store.request(_approval("a1"))
    assert call(ARGS, "a1") == (False, "refused: approval a1 is not being run in this chat")
    store.decide("a1", GROUP, approve=True, by="root")
    store.claim_run("a1", GROUP, "turn-2")
    # the model (or a forged call) cannot change what was approved
    assert call({"command": "rm -rf ."}, "a1") == \
        (False, "refused: the call differs from what approval a1 approved")
    store.request(_approval("b2", "local:bob"))
    store.decide("b2", "local:bob", approve=True, by="root")
    store.claim_run("b2", "local:bob", "turn-9")
    assert call(ARGS, "b2") == (False, "refused: approval b2 is not being run in this chat")
    ok, out = call(ARGS, "a1")
    assert ok and "approved-42" in out
    store.finish_run("a1", "{}")
    assert call(ARGS, "a1") == (False, "refused: approval a1 is not being run in this chat")
    client.close()


def test_approve_names_are_checked_and_a_group_overrides_them() -> None:
    with pytest.raises(ConfigError, match="approve: unknown tool"):
        parse_config({"tools": {"approve": ["rm"]}}, env={})
    settings = parse_config({"tools": {
        "sandbox": True, "approve": ["run_command", "github.create_issue"],
        "approval_timeout": 600,
        "groups": {"local:lab": {"approve": [], "approval_timeout": 5}}}}, env={})
    team = settings.tools.for_group("local:team")
    assert team.approve == {"run_command", "github.create_issue"}
    assert team.approval_timeout == 600
    lab = settings.tools.for_group("local:lab")
    assert lab.approve == frozenset() and lab.approval_timeout == 5


def test_an_approval_moves_once(valkey: Valkey) -> None:
    """Eight admins approving at once run it once; a retried approval turn gets the
    stored result, or a refusal while its first run's outcome is unknown; never a
    second run."""
    client = redis.Redis.from_url(valkey.url)
    store = ApprovalStore(client)
    store.request(_approval("c3"))
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda i: store.decide("c3", GROUP, approve=True,
                                                        by=f"admin{i}")[1], range(8)))
    assert outcomes.count(None) == 1
    assert all(o.startswith("Approval c3 was already approved by admin") for o in outcomes
               if o is not None)
    assert store.claim_run("c3", GROUP, "turn-a")[1] is None
    assert "outcome is unknown" in (store.claim_run("c3", GROUP, "turn-a")[1] or "")
    assert store.claim_run("c3", GROUP, "turn-b")[1] == "approval c3 is running, not approved"
    store.finish_run("c3", '{"call_id": "x", "ok": true, "output": "done"}')
    again, refusal = store.claim_run("c3", GROUP, "turn-a")
    assert refusal is None and again is not None and '"output": "done"' in again.result
    client.close()


def test_a_retried_turn_does_not_ask_again_for_a_decided_call(valkey: Valkey) -> None:
    client = redis.Redis.from_url(valkey.url)
    msg = Inbound(channel="local", chat_id="ada", sender_id="ada", sender_name="Ada",
                  message_id="m1", text="count", is_group=True, mentions_bot=True,
                  received_at=datetime.now(UTC))

    def ask() -> Approval:
        return request_approval(client, Keys(), group=GROUP, turn_id="turn-r",
                                messages=[msg], tool="run_command", args=ARGS, timeout=60)

    first = ask()
    assert waiting_text(first).startswith(f"waiting for approval {first.id}")
    assert f"/approve {first.id}" in notice(first) and first.asked_by == "local:ada"
    ApprovalStore(client).decide(first.id, GROUP, approve=False, by="root")
    again = ask()  # the same turn retried after a crash: the same approval, decided
    assert again.id == first.id and again.state == "denied"
    assert waiting_text(again) == (f"approval {first.id} of this run_command call was "
                                   "denied already; it is not asked again from this turn.")
    client.close()

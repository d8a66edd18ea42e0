"""Redaction reaches the tool calls waiting for, or run after, an admin's approval
(``gateway.queue.approvals``): their recorded arguments and stored output lose the
deleted or forgotten words, for the redacted chat only, without losing a concurrent
``/approve`` or ``/deny``. Real Valkey, the redaction job called in-process."""

from __future__ import annotations

import time
from typing import Any

import redis

from gateway.queue import GroupQueue, Keys
from gateway.queue.approvals import (
    Approval,
    ApprovalStore,
    approval_key,
    chat_key,
    due_key,
)
from gateway.queue.toolcalls import ToolResult
from memory_store.maintenance import REDACTED_MARKER, scrub_value, words_matcher
from tests.pipeline.conftest import Valkey, deleted_m1
from workers.context import WorkerContext
from workers.redaction import redact_group
from workers.redisscrub import scrub_approvals

K = Keys()
SECRET = "my door code is 4417 Zanzibar"
GROUP, OTHER = "local:ann", "local:bob"


def _approval(aid: str, group: str, args: dict[str, Any], **kw: Any) -> Approval:
    now = time.time()
    chat = group.partition(":")[2]
    return Approval(id=aid, group=group, tool="run_command", args=args, asked_by=chat,
                    turn_id=f"turn-{aid}", created=now, expires=now + 600,
                    channel="local", account="default", chat_id=chat, thread_id=None,
                    is_group=False, **kw)


def _raw(r: redis.Redis, aid: str) -> bytes:
    return r.get(approval_key(K, aid)) or b""


def test_a_deletion_takes_its_words_out_of_the_chats_approvals_only(
        ctx: WorkerContext) -> None:
    """A call run after approval (arguments and output hold the words), one denied and
    one still pending (arguments hold them) in the chat; another chat's call holding the
    same words. After the deletion's redaction no record of the chat holds them; the
    run and the denied call keep their state; the pending one is withdrawn (it would
    otherwise run with arguments the admin never saw) and ``/approve`` says so; the
    other chat's record is untouched, byte for byte."""
    r, store = ctx.redis, ApprovalStore(ctx.redis, K)
    deleted_m1(ctx, GROUP, SECRET)
    result = ToolResult("c1", True, output=f"wrote: {SECRET}").to_json()
    store.request(_approval("a1done", GROUP, {"command": f"echo '{SECRET}' >> notes"},
                            state="done", decided_by="Boss (local:boss)",
                            ran_turn="turn-r", result=result))
    store.request(_approval("a2deny", GROUP, {"command": "door zanzibar"}, state="denied"))
    store.request(_approval("a3wait", GROUP, {"command": "tell zanzibar"}))
    store.request(_approval("b1wait", OTHER, {"command": f"echo '{SECRET}'"}))
    others = _raw(r, "b1wait")
    ttl = r.ttl(approval_key(K, "a1done"))

    assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"

    for aid in ("a1done", "a2deny", "a3wait"):
        assert b"zanzibar" not in _raw(r, aid).lower(), aid
    done, denied, waiting = (store.get(a) for a in ("a1done", "a2deny", "a3wait"))
    assert done is not None and denied is not None and waiting is not None
    assert (done.state, done.decided_by, done.ran_turn) == \
        ("done", "Boss (local:boss)", "turn-r")
    assert ToolResult.from_json(done.result).output == f"wrote: {REDACTED_MARKER}"
    assert done.args == {"command": f"echo '{REDACTED_MARKER}' >> notes"}
    assert (denied.state, denied.args) == ("denied", {"command": f"door {REDACTED_MARKER}"})
    assert waiting.state == "withdrawn" and waiting.args == {"command": f"tell {REDACTED_MARKER}"}
    assert r.zscore(due_key(K), "a3wait") is None  # the gateway no longer expires it
    _, refusal = store.decide("a3wait", GROUP, approve=True, by="Boss (local:boss)")
    assert refusal is not None and "withdrawn" in refusal
    assert 0 < r.ttl(approval_key(K, "a1done")) <= ttl  # it still expires
    assert r.ttl(chat_key(K, GROUP)) >= r.ttl(approval_key(K, "a3wait")) > 0  # its index
    assert _raw(r, "b1wait") == others
    assert r.zscore(due_key(K), "b1wait") is not None


def test_a_scrub_keeps_a_decision_made_while_it_ran(ctx: WorkerContext,
                                                    valkey: Valkey) -> None:
    """An admin's ``/deny`` lands between the scrub's read of a pending record and its
    write: the scrub starts over on the denied record (WATCH), so the call stays denied
    by that admin (not withdrawn over the decision) and still loses the words."""
    r = ctx.redis
    store = ApprovalStore(r, K)
    store.request(_approval("a4race", GROUP, {"command": "tell zanzibar"}))
    admin = ApprovalStore(redis.Redis.from_url(valkey.url), K)
    pat = words_matcher([SECRET])
    assert pat is not None
    seen: list[str] = []

    def scrub(a: Approval) -> tuple[dict[str, Any], str]:
        seen.append(a.state)
        # the first look picks the records to rewrite; during the second (the move's),
        # the admin's /deny comes from another connection
        if len(seen) == 2:
            assert admin.decide("a4race", GROUP, approve=False, by="Boss")[1] is None
        return scrub_value(a.args, pat), a.result

    try:
        assert store.redact(GROUP, scrub) == 1
    finally:
        admin.r.close()
    after = store.get("a4race")
    assert after is not None
    assert seen == ["pending", "pending", "denied"]
    assert (after.state, after.decided_by) == ("denied", "Boss")
    assert after.args == {"command": f"tell {REDACTED_MARKER}"}


def test_scrub_approvals_rewrites_only_the_chats_records_holding_the_words(
        ctx: WorkerContext) -> None:
    """The worker side's entry point rewrites only the chat's records that hold the
    words: not one without them, not another chat's even when its id sits in the chat's
    index; an expired record's id leaves the index."""
    r, store = ctx.redis, ApprovalStore(ctx.redis, K)
    store.request(_approval("a5plain", GROUP, {"command": "ls"}))
    store.request(_approval("a6word", GROUP, {"command": "echo zanzibar"}, state="denied"))
    store.request(_approval("a7gone", GROUP, {"command": "echo zanzibar"}))
    r.delete(approval_key(K, "a7gone"))  # expired
    store.request(_approval("b2other", OTHER, {"command": "echo zanzibar"}))
    r.sadd(chat_key(K, GROUP), "b2other")
    before = {a: _raw(r, a) for a in ("a5plain", "b2other")}
    pat = words_matcher([SECRET])
    assert pat is not None
    assert scrub_approvals(GroupQueue(r, K, GROUP), pat) == 1
    assert {a: _raw(r, a) for a in before} == before
    assert b"zanzibar" not in _raw(r, "a6word")
    assert {x.decode() for x in r.smembers(chat_key(K, GROUP))} == \
        {"a5plain", "a6word", "b2other"}

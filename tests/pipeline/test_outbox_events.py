"""Outbox events: every writer of the stream (the front desk's pipeline, the turn's and
the budget park's Lua scripts) stores exactly what ``gateway.queue.events`` built, and
the outbox's reader reads it back, against a real Valkey."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from channels.models import Inbound, Outbound
from gateway.config import parse_config
from gateway.intake import FrontDesk, Router
from gateway.queue import (
    Budget,
    GroupQueue,
    Keys,
    MalformedEvent,
    OutboxEvent,
    events,
    read_event,
)
from gateway.queue.scripts import NAMES, source
from tests.pipeline.conftest import Valkey

K = Keys()


def _msg(mid: str, chat: str = "c1", thread: str | None = None) -> Inbound:
    return Inbound(channel="local", chat_id=chat, thread_id=thread, is_group=False,
                   sender_id="ann", sender_name="Ann", message_id=mid, text="hi")


def _reply(msg: Inbound, text: str, reply_id: str) -> OutboxEvent:
    return events.reply(Outbound(channel=msg.channel, account=msg.account,
                                 chat_id=msg.chat_id, thread_id=msg.thread_id, text=text,
                                 reply_to_id=msg.message_id, reply_id=reply_id))


async def test_every_writer_round_trips_through_the_reader(valkey: Valkey) -> None:
    r = redis.Redis.from_url(valkey.url)
    ar = aioredis.Redis.from_url(valkey.url)
    try:
        written: list[OutboxEvent] = []
        # a worker's turn: typing (turn_begin.lua), reply + done (turn_publish.lua)
        m1 = _msg("m1", thread="t9")
        gq = GroupQueue(r, K, m1.group)
        r.set(K.lock(m1.group), "tok")
        typing = events.typing(m1)
        assert gq.turn_begin("turn-a", typing, 5).attempts == 1
        reply, done = _reply(m1, "hello", "turn-a"), events.done(m1, ["m1"], "turn-a", "turn-a")
        assert gq.turn_publish("turn-a", K.lock(m1.group), "tok", reply, done, "hello") == 1
        written += [typing, reply, done]
        # a silent turn: done only
        silent = events.done(m1, ["m1b"], None, "turn-b")
        assert gq.turn_publish("turn-b", K.lock(m1.group), "tok", None, silent, None) == 1
        written.append(silent)
        # a spending cap: the notice and done (budget_park.lua)
        notice = _reply(m1, "budget spent", "turn-c.budget.d1")
        parked = events.done(m1, ["m1c"], "turn-c.budget.d1", "turn-c")
        assert Budget(r, K).park(m1.group, token="tok", turn_id="turn-c", period_id="g:d1",
                                 notice_event=notice, done_event=parked) == 1
        written += [notice, parked]
        # the front desk: a command's answer (reply + done), a denied stranger (done)
        desk = FrontDesk(parse_config({}, env={}), ar, r, K, Router(parse_config({}, env={})))
        m2, m3 = _msg("m2", chat="c2"), _msg("m3", chat="c3")
        assert await desk._answer(m2, "you are ann", "command") == "command"
        assert await desk._answer(m3, None, "pairing") == "pairing"
        stored = [read_event(f) for _, f in r.xrange(K.outbox)]
        assert stored[:len(written)] == written
        front = stored[len(written):]
        assert [e.kind for e in front] == [events.REPLY, events.DONE, events.DONE]
        reply_id = Outbound.model_validate(front[0].payload()).reply_id
        assert front[1] == events.done(m2, ["m2"], reply_id)
        assert front[2] == events.done(m3, ["m3"], None)
        # the reader's view: each event names its chat, and a reply is an Outbound
        assert [e.chat for e in stored] == [("local", "default", "c1")] * 6 + \
            [("local", "default", "c2")] * 2 + [("local", "default", "c3")]
        for e in stored:
            if e.kind == events.REPLY:
                Outbound.model_validate(e.payload())
    finally:
        r.close()
        await ar.aclose()


def test_no_script_spells_an_event_itself() -> None:
    """A script that ``XADD``s a new entry takes its whole field list from an argument
    (``OutboxEvent.lua_arg``): a field name or kind written in Lua would be a second
    definition of the event's shape."""
    for name in NAMES:
        for line in source(name).splitlines():
            if re.search(r"'XADD',\s*KEYS\[\d+\],\s*'\*'", line):
                assert "unpack(cjson.decode(ARGV[" in line, (name, line)
                assert not re.search(r"'(type|data|typing|reply|done)'", line), (name, line)


def test_no_module_spells_an_event_itself() -> None:
    """Python writers put ``OutboxEvent.fields()`` on the outbox, never a dict of their
    own (gateway/queue/events.py is the one place that names the fields)."""
    root = Path(__file__).resolve().parents[2]
    spelled = [f"{path.relative_to(root)}:{n}" for pkg in ("gateway", "workers")
               for path in sorted((root / pkg).rglob("*.py"))
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
               if re.search(r"xadd\([^)]*\{", line)]
    assert spelled == []


@pytest.mark.parametrize("fields", [
    {"type": "reply"}, {"data": "{}"}, {"type": "done", "data": "[1]"},
    {"type": "done", "data": '{"channel": "x"}'}, {"type": "x", "data": "no"}])
def test_a_malformed_entry_is_refused(fields: dict[str, str]) -> None:
    with pytest.raises(MalformedEvent):
        read_event(fields)

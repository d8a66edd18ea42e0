"""Issue 20, item 9: a linked person's DMs never use ``persons/<id>/`` at once.

Their DMs are different groups with different group locks; each turn (and background
job) that uses the person's directory also takes the person's lock, after its group's.
Real Valkey, two real worker processes, the gateway in-process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest
import redis

from gateway.config import load_worker_settings
from gateway.queue import Keys
from tests.pipeline.conftest import Stack, Valkey, write_config
from tests.pipeline.test_identity import LINKED, dm
from workers import context, drain
from workers.agent import clear_agent_cache
from workers.context import WorkerContext
from workers.extraction import extract_group
from workers.lock import GroupLock

K = Keys()

PERSON_LOCK = K.person_lock("person:ada")


def inside_at_once(events: list[bytes]) -> int:
    """The most turns inside the model at one time, from ``enter``/``exit`` records."""
    inside: set[str] = set()
    most = 0
    for event in events:
        what, pid = event.decode().split()
        if what == "enter":
            inside.add(pid)
            most = max(most, len(inside))
        else:
            inside.discard(pid)
    return most


def linked_stack(tmp_path: Path, valkey: Valkey) -> Stack:
    stack = Stack(tmp_path, valkey, LINKED)
    text = stack.config_path.read_text(encoding="utf-8")
    stack.config_path.write_text(
        text.replace("tests.pipeline.scripted:model", "tests.pipeline.person_model:model"),
        encoding="utf-8")
    return stack


async def test_two_linked_dms_take_turns_and_a_dead_holders_lock_expires(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = linked_stack(tmp_path, valkey)
    try:
        stack.start_workers(2)
        gw = await stack.start_gateway()
        assert gw.inbox is not None
        # Ada's Telegram DM: its turn holds the model (and so persons/ada/) until released
        first = dm("telegram", "42", "42", "t1", "BLOCK remember my boat")
        assert await gw.inbox.accept(first) == "engage"
        pid_file = stack.tmp / "blocked.pid"
        await stack.wait_for(pid_file.exists, what="the Telegram turn to block")
        holder = int(pid_file.read_text())
        # Ada's Slack DM, on the other worker: its job takes its batch (its own group
        # lock), then must wait for the person's lock
        second = dm("slack", "D0999", "U0123", "s1", "what is my boat called?")
        assert await gw.inbox.accept(second) == "engage"
        await stack.wait_for(lambda: stack.r.llen("pnc:processing:slack:D0999") > 0,
                             what="the Slack turn to take its batch")
        await asyncio.sleep(1.0)  # room for the Slack turn to (wrongly) enter the model
        assert inside_at_once(stack.r.lrange("test:person", 0, -1)) == 1
        assert stack.r.exists(PERSON_LOCK)

        # the holder dies (kill -9) mid-turn: its person lock expires by its TTL, and
        # the Slack turn goes ahead, while the killed turn is retried later
        (stack.tmp / "release").touch()  # the retry of the Telegram turn must not block
        os.kill(holder, signal.SIGKILL)
        stack.r.rpush("test:person", f"exit {holder}")  # it left by dying
        await stack.settled("slack:D0999")
        await stack.settled("telegram:42", timeout=90)
        events = stack.r.lrange("test:person", 0, -1)
        assert inside_at_once(events) == 1
        turns = [t["ids"] for t in stack.turns()]
        assert sorted(turns) == [["s1"], ["t1"], ["t1"]]  # the killed try, its retry
        episodes = list((stack.data_dir / "persons" / "ada" / "episodes").rglob("*.md"))
        assert len(episodes) == 2
        assert not stack.r.exists(PERSON_LOCK)
    finally:
        await stack.close()


def test_a_background_job_waits_for_the_persons_lock_until_a_dead_holders_expires(
        tmp_path: Path, valkey: Valkey, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path / "pnc.toml", valkey.url, LINKED)
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('backend = "file"', 'backend = "file"\nextract = true')
                    .replace("tests.pipeline.scripted:model",
                             "tests.pipeline.extract_model:model"), encoding="utf-8")
    monkeypatch.setenv("PYNANOCLAW_CONFIG", str(path))
    context.install(None)
    clear_agent_cache()
    ctx = WorkerContext(load_worker_settings(path), redis.Redis.from_url(valkey.url))
    group = "telegram:42"
    entity = ctx.settings.data_dir / "persons" / "ada" / "entities" / "entity-ada.md"
    try:
        msg = dm("telegram", "42", "42", "t1", "Ada moved to Lisbon")
        ctx.redis.rpush(K.mailbox(group), json.dumps(
            {"seq": 1, "engaged": True, "msg": json.loads(msg.model_dump_json())}))
        assert drain.drain_group(group, ctx=ctx, lock_ttl=1, lease_ttl=1)["turns"] == 1
        assert ctx.redis.llen(K.extractions(group)) == 1
        # a turn of Ada's Slack DM holds persons/ada/, and its worker dies: nobody renews
        holder = GroupLock(ctx.redis, K.person_lock("person:ada"), None, ttl=3,
                           lease_ttl=3)
        assert holder.acquire(timeout=1)
        holder.stop_renewal()
        assert extract_group(group, ctx=ctx, lock_ttl=1)["end"] == "rescheduled"
        assert not entity.exists()  # nothing written to persons/ada/ meanwhile
        assert ctx.redis.llen(K.extractions(group)) == 1
        # the dead holder's lock lapses by its TTL; the rescheduled job then writes
        deadline = time.monotonic() + 30
        while ctx.redis.exists(holder.lock_key):
            assert time.monotonic() < deadline, "the dead holder's lock never expired"
            time.sleep(0.1)
        assert extract_group(group, ctx=ctx, lock_ttl=1, reschedules=1)["end"] == "extracted"
        assert "Lisbon" in entity.read_text(encoding="utf-8")
        assert not ctx.redis.exists(K.person_lock("person:ada"))
    finally:
        ctx.close()
        context.install(None)
        clear_agent_cache()

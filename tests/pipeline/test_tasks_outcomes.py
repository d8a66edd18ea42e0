"""What becomes of a task's runs (real Valkey, real files): N failures in a row pause it
and tell the chat once; a run a spent budget stopped is logged as skipped, not failed;
/forget's words remove a task holding them; /tasks and ``pynanoclaw tasks`` obey who may
change whose task."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import redis
import redis.asyncio as aioredis
from typer.testing import CliRunner

from channels.local import LocalChannel
from channels.models import Inbound
from gateway.config import load_config, load_worker_settings
from gateway.intake import run_command
from gateway.operations import tasks_app
from gateway.outgoing import Outbox
from gateway.queue import Keys
from memory_store import GroupDirectory
from memory_store.files import AuditLog
from memory_store.tasks import TaskSpec, TaskStore, Where, validate
from workers.context import WorkerContext
from workers.redaction import redact_group
from workers.taskforget import REMOVED_NOTICE
from workers.taskruns import note_runs

from .conftest import Valkey, write_config

K = Keys()
GROUP = "local:room"
WHERE = Where(group=GROUP, channel="local", chat_id="room", is_group=True,
              creator="local:alice", creator_role="member")


def notices(r: redis.Redis) -> list[str]:
    return [json.loads(f[b"data"])["text"] for _, f in r.xrange(K.outbox)
            if f[b"type"] == b"reply"]


def setup(tmp_path: Path, valkey: Valkey, *names: str) -> tuple[TaskStore, redis.Redis, Path]:
    path = write_config(tmp_path / "pynanoclaw.toml", valkey.url, "[tasks]\npause_after = 3\n")
    cfg = load_config(path)
    store = TaskStore(GroupDirectory(cfg.data_dir, GROUP))
    for name in names:
        store.create(validate(TaskSpec(name=name, text=f"summarize project zebra {name}",
                                       every="1h"), WHERE, default_zone="UTC",
                              min_interval=60, now=datetime.now(UTC)), actor="t", cap=9)
    return store, redis.Redis.from_url(valkey.url), path


def test_failures_pause_once_and_a_spent_budget_is_not_a_failure(
        tmp_path: Path, valkey: Valkey) -> None:
    store, r, path = setup(tmp_path, valkey, "nightly")
    settings = load_config(path)
    senders = ["bob", "task:nightly"]
    for outcome in ("dead", "parked", "dead", "published", "dead", "dead"):
        note_runs(r, K, settings, GROUP, senders, outcome)
    task = store.get("nightly")
    assert task is not None and task.state == "active" and task.failures == 2  # ok reset it
    note_runs(r, K, settings, GROUP, senders, "dead")  # the third in a row
    task = store.get("nightly")
    assert task is not None and task.state == "paused" and task.failures == 3
    note_runs(r, K, settings, GROUP, senders, "dead")  # a run already queued fails too
    told = [n for n in notices(r) if "paused the scheduled task" in n]
    assert len(told) == 1 and "last 3 runs failed" in told[0]
    outcomes = [x["outcome"] for x in store.runs("nightly", 50)]
    assert outcomes.count("skipped") == 1 and outcomes.count("failed") == 6
    assert outcomes.count("ok") == 1


def test_forget_and_a_deletion_remove_the_tasks_holding_their_words(
        tmp_path: Path, valkey: Valkey) -> None:
    store, r, path = setup(tmp_path, valkey, "weekly", "nightly")
    settings = load_worker_settings(path)
    # "nightly" was made from a message that was then deleted on its platform
    nightly = store.get("nightly")
    assert nightly is not None
    store.save(nightly.with_(text="ping the oncall pager about build status"), actor="t")
    ctx = WorkerContext(settings, r)
    _, mem = ctx.group_memory(GROUP)
    mem.write_sync(f"Turn in {GROUP}.\n\n- [2026-11-30 10:00:00] Ann (ann): ping the oncall "
                   "pager about build status\n\nBot: ok\n", kind="episode",
                   metadata={"id": "turn-x", "message_ids": ["m1"], "trust": 0.5,
                             "source": f"{GROUP}:msg/m1"})
    r.rpush(K.forget(GROUP), json.dumps({"id": "forget-1", "phrase": "project zebra",
                                         "by": "local:root", "at": time.time()}))
    r.rpush(K.changes(GROUP), json.dumps({"kind": "deletion", "original_id": "m1",
                                          "event_id": "d1", "account": "default"}))
    try:
        assert redact_group(GROUP, ctx=ctx)["end"] == "redacted"
    finally:
        ctx.close()
    assert store.all() == []
    told = notices(r)
    assert sorted(told) == sorted(REMOVED_NOTICE.format(name=n) for n in ("weekly", "nightly"))
    audit = AuditLog(store.gd.path).path.read_text()
    assert audit.count("task_delete") == 2 and "zebra" not in audit and "pager" not in audit


def _msg(sender: str, text: str, *, admin: bool = False) -> Inbound:
    return Inbound(channel="local", chat_id="room", is_group=True, sender_id=sender,
                   sender_name=sender, message_id=f"m-{sender}-{len(text)}", text=text,
                   is_admin=admin)


def test_tasks_command_and_cli_say_who_may_change_whose_task(
        tmp_path: Path, valkey: Valkey) -> None:
    store, _r, path = setup(tmp_path, valkey, "mine", "other")
    cfg = load_config(path)
    listing = run_command(_msg("carol", "/tasks"), cfg)
    assert listing is not None and "mine:" in listing and "other:" in listing
    refused = run_command(_msg("carol", "/tasks pause mine"), cfg)
    assert refused is not None and refused.startswith("Not allowed")
    assert run_command(_msg("alice", "/tasks pause mine"), cfg) == "Paused mine."
    assert run_command(_msg("root", "/tasks cancel other", admin=True), cfg) == \
        "Cancelled other."
    assert [t.id for t in store.all()] == ["mine"]
    cli = CliRunner()
    out = cli.invoke(tasks_app, ["resume", GROUP, "mine", "--config", str(path)])
    assert out.exit_code == 0 and "Resumed mine." in out.output
    task = store.get("mine")
    assert task is not None and task.state == "active"
    out = cli.invoke(tasks_app, ["log", GROUP, "mine", "--config", str(path)])
    assert "paused" in out.output and "resumed" in out.output
    out = cli.invoke(tasks_app, ["show", GROUP, "nope", "--config", str(path)])
    assert out.exit_code == 1 and "No task named 'nope'" in out.output


async def test_same_named_tasks_of_two_chats_removed_at_once_are_each_told(
        tmp_path: Path, valkey: Valkey) -> None:
    """A task's id is its name, unique within its chat only, and the outbox sends each
    reply id once: two chats' tasks "weekly", made in the same second and removed by a
    ``/forget`` of their words, each get their notice out through the real outbox."""
    path = write_config(tmp_path / "pynanoclaw.toml", valkey.url)
    r = redis.Redis.from_url(valkey.url)
    now = datetime.now(UTC)
    chats = ("room", "den")
    for chat in chats:
        where = Where(group=f"local:{chat}", channel="local", chat_id=chat, is_group=True,
                      creator="local:alice", creator_role="member")
        TaskStore(GroupDirectory(load_config(path).data_dir, where.group)).create(validate(
            TaskSpec(name="weekly", text="summarize project zebra", every="1h"), where,
            default_zone="UTC", min_interval=60, now=now), actor="t", cap=9)
        r.rpush(K.forget(where.group), json.dumps({"id": f"forget-{chat}", "by": "t",
                                                   "phrase": "project zebra"}))
    ctx = WorkerContext(load_worker_settings(path), r)
    try:
        for chat in chats:
            assert redact_group(f"local:{chat}", ctx=ctx)["end"] == "redacted"
    finally:
        ctx.close()
    channel = LocalChannel(valkey.url)
    client = aioredis.Redis.from_url(valkey.url)
    try:
        ob = Outbox(client, {("local", "default"): channel}, K, consumer="gw")
        for _, fields in r.xrange(K.outbox):
            assert await ob.handle({k.decode(): v.decode() for k, v in fields.items()})
        told = {chat: [f[b"text"] for _, f in await client.xrange(channel.keys.out(chat))
                       if f[b"type"] == b"chunk"] for chat in chats}
    finally:
        await client.aclose()
        await channel.stop()
    notice = REMOVED_NOTICE.format(name="weekly").encode()
    assert told == {chat: [notice] for chat in chats}

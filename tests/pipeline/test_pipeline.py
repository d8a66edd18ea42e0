"""End to end: local channel -> gateway -> Valkey -> RQ worker process -> outbox."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import yaml

from gateway.queue import Keys
from memory_store import GroupDirectory
from tests.pipeline.conftest import Stack, Valkey

K = Keys()


def front_matter(path: Path) -> dict[str, object]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), text[:80]
    head = text.split("---\n", 2)[1]
    data = yaml.safe_load(head)
    assert isinstance(data, dict)
    return data


def episodes(data_dir: Path, group: str) -> list[Path]:
    return sorted((GroupDirectory(data_dir, group).path / "episodes").rglob("*.md"))


async def test_dm_gets_exactly_one_reply_and_an_episode(stack: Stack) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    ex = await stack.ask("alice", "alice", "hello bot", message_id="dm-1")
    assert ex.status == "engage"
    assert ex.reply == "ack dm-1"
    await stack.settled("local:alice")
    assert len(stack.chunks_for("alice", "dm-1")) == 1
    assert [t["ids"] for t in stack.turns()] == [["dm-1"]]
    files = episodes(stack.data_dir, "local:alice")
    assert len(files) == 1
    fm = front_matter(files[0])
    assert fm["kind"] == "episode"
    assert str(fm["id"]).startswith("turn-")
    assert fm["message_ids"] == ["dm-1"]
    assert fm["participants"] and "alice" in str(fm["participants"])
    assert fm["created"] and 0 < float(fm["trust"]) <= 1  # type: ignore[arg-type]
    assert "hello bot" in files[0].read_text()
    # the group directory was created from templates on first contact
    assert GroupDirectory(stack.data_dir, "local:alice").core_path.exists()


async def test_group_message_without_mention_is_kept_for_the_next_turn(stack: Stack) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    first = await stack.ask("team", "bob", "lunch at noon?", group=True, message_id="g-1")
    assert first.status == "context"
    assert first.reply is None
    assert stack.r.llen(K.context("local:team")) == 1
    assert stack.turns() == []
    second = await stack.ask("team", "carol", "@bot what did bob ask?", group=True,
                             message_id="g-2")
    assert second.status == "engage"
    assert second.reply == "ack g-1 g-2"
    assert [t["ids"] for t in stack.turns()] == [["g-1", "g-2"]]
    assert stack.r.llen(K.context("local:team")) == 0
    assert stack.chunks_for("team", "g-1") == []


async def test_trigger_word_and_always_override(tmp_path: Path, valkey: Valkey) -> None:
    s = Stack(tmp_path, valkey, extra_config='[engage]\ntrigger_words = ["claw"]\n'
              '[groups."local:loud"]\nengage = "always"\n')
    try:
        s.start_workers(1)
        await s.start_gateway()
        ex = await s.ask("quiet", "bob", "hey Claw, hi", group=True, message_id="q-1")
        assert (ex.status, ex.reply) == ("engage", "ack q-1")
        ex = await s.ask("quiet", "bob", "clawback rules", group=True, message_id="q-2")
        assert ex.status == "context"
        ex = await s.ask("loud", "bob", "anything", group=True, message_id="l-1")
        assert (ex.status, ex.reply) == ("engage", "ack l-1")
    finally:
        await s.close()


async def test_same_platform_message_twice_gets_one_reply(stack: Stack) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    ex1 = await stack.ask("dave", "dave", "once", message_id="dup-1")
    ex2 = await stack.ask("dave", "dave", "once", message_id="dup-1", timeout=10)
    assert ex1.reply == "ack dup-1"
    assert ex2.status == "duplicate"
    assert ex2.reply is None
    await stack.settled("local:dave")
    assert len(stack.chunks_for("dave", "dup-1")) == 1
    assert [t["ids"] for t in stack.turns()] == [["dup-1"]]


async def test_silent_turn_publishes_done_without_reply(stack: Stack) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    ex = await stack.ask("erin", "erin", "SILENT", message_id="s-1")
    assert ex.status == "engage" and ex.done
    assert ex.reply is None
    await stack.settled("local:erin")
    assert len(episodes(stack.data_dir, "local:erin")) == 1


@pytest.mark.slow
async def test_restart_everything_uses_group_memory_files(tmp_path: Path, valkey: Valkey) -> None:
    s = Stack(tmp_path, valkey)
    try:
        s.start_workers(1)
        await s.start_gateway()
        ex = await s.ask("proj", "frank", "@bot remember", group=True, message_id="r-1")
        assert ex.reply == "ack r-1"
        await s.settled("local:proj")
        core = GroupDirectory(s.data_dir, "local:proj").core_path
        core.write_text(core.read_text() + "\nThe project codename is MARK-zebra42.\n")
        # stop everything, Redis included
        await s.stop_gateway()
        s.stop_workers()
        valkey.stop()
    finally:
        await s.close()
    valkey.start()
    s2 = Stack(tmp_path, valkey)
    try:
        s2.start_workers(1)
        await s2.start_gateway()
        # Redis came back from its AOF: the old message id is still known
        again = await s2.ask("proj", "frank", "@bot remember", group=True, message_id="r-1",
                             timeout=10)
        assert again.status == "duplicate"
        ex = await s2.ask("proj", "frank", "@bot what is the codename?", group=True,
                          message_id="r-2")
        assert ex.reply == "ack r-2 | MARK-zebra42"
        await s2.settled("local:proj")
        assert len(episodes(s2.data_dir, "local:proj")) == 2
    finally:
        await s2.close()


@pytest.mark.slow
@pytest.mark.parametrize("worker_class", ["simple", "fork"])
async def test_worker_killed_mid_turn_answers_exactly_once(
    stack: Stack, worker_class: str
) -> None:
    stack.start_workers(1, worker_class)
    await stack.start_gateway()
    assert stack.client is not None
    await stack.client.push(chat_id="gina", user="gina", text="BLOCK please",
                            message_id="k-1")
    pid_file = stack.tmp / "blocked.pid"
    await stack.wait_for(pid_file.exists, what="the model to block")
    turn_pid = int(pid_file.read_text())
    os.kill(turn_pid, signal.SIGKILL)  # the process running the turn
    if worker_class == "simple":
        stack.kill_workers()  # that was the worker itself: start a new one
        stack.start_workers(1, worker_class)
    (stack.tmp / "release").touch()
    await stack.wait_for(lambda: len(stack.chunks_for("gina", "k-1")) >= 1, timeout=90,
                         what="the retried reply")
    await stack.settled("local:gina")
    chunks = stack.chunks_for("gina", "k-1")
    assert [c["text"] for c in chunks] == ["ack k-1"]
    turns = stack.turns()
    assert [t["ids"] for t in turns] == [["k-1"], ["k-1"]]  # the killed try, the retry
    assert turns[0]["pid"] == turn_pid and turns[1]["pid"] != turn_pid
    assert len(episodes(stack.data_dir, "local:gina")) == 1
    assert stack.r.llen(K.processing("local:gina")) == 0


async def test_group_keys_cannot_escape_the_data_dir(stack: Stack) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    evil = ["../../etc", "..", "a\x00b", "a/b/../../../c", "/abs/path"]
    for i, chat in enumerate(evil):
        ex = await stack.ask(chat, "mallory", "hi", message_id=f"e-{i}")
        assert ex.reply == f"ack e-{i}", chat
        await stack.settled(f"local:{chat}")
    data = stack.data_dir.resolve()
    outside = [p for p in stack.tmp.rglob("*")
               if not p.resolve().is_relative_to(data) and "redis" not in p.parts
               and p.name not in {"pynanoclaw.toml", "blocked.pid", "release"}]
    assert outside == []
    for chat in evil:
        gd = GroupDirectory(stack.data_dir, f"local:{chat}")
        assert gd.path.resolve().is_relative_to(data / "groups" / "local")
        assert len(list((gd.path / "episodes").rglob("*.md"))) == 1
    assert not (stack.tmp / "etc").exists()


@pytest.mark.slow
async def test_50_groups_x_20_messages_with_4_workers(stack: Stack) -> None:
    stack.start_workers(4, env={"PNC_TEST_DELAY": "0.005"})
    await stack.start_gateway()
    assert stack.client is not None
    groups, per = 50, 20
    sent: dict[str, list[str]] = {f"local:c{g}": [] for g in range(groups)}
    for j in range(per):
        for g in range(groups):
            mid = f"c{g}-m{j}"
            await stack.client.push(chat_id=f"c{g}", user=f"u{j % 3}", text=f"msg {j}",
                                    is_group=True, mention=True, message_id=mid)
            sent[f"local:c{g}"].append(mid)

    def seen() -> int:
        return sum(len(t["ids"]) for t in stack.turns())

    await stack.wait_for(lambda: seen() >= groups * per, timeout=240, what="all messages")
    await stack.wait_for(lambda: stack.r.scard(K.active) == 0, timeout=60, what="drained")
    turns = stack.turns()
    assert stack.r.lrange("test:overlap", 0, -1) == []  # never two turns of a group at once
    by_group: dict[str, list[str]] = {}
    for t in turns:
        by_group.setdefault(t["group"], []).extend(t["ids"])
    assert by_group == sent  # every message once, in order, in its own group
    all_ids = [i for t in turns for i in t["ids"]]
    assert len(all_ids) == len(set(all_ids)) == groups * per
    # one reply per turn reached the chats
    assert stack.gateway is not None and stack.gateway.outbox is not None
    await stack.wait_for(lambda: stack.gateway.outbox.stats.sent == len(turns),  # type: ignore[union-attr]
                         timeout=60, what="replies sent")


async def test_inbox_raises_when_redis_is_down(stack: Stack) -> None:
    from channels.models import Inbound

    await stack.start_gateway()
    assert stack.gateway is not None and stack.gateway.inbox is not None
    stack.valkey.stop()
    msg = Inbound(channel="local", chat_id="x", is_group=False, sender_id="u", sender_name="u",
                  message_id="down-1", text="hi")
    with pytest.raises(Exception) as info:
        await asyncio.wait_for(stack.gateway.inbox(msg), timeout=30)
    import redis

    assert isinstance(info.value, redis.RedisError | OSError)

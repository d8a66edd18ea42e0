"""Dead-letter queue operations on a real Valkey: records say which turn, when and why;
retry puts the entries back in arrival order, once, clears the turn's record and takes
the lease for one drain job; drop deletes (the CLI asks first)."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from rq import Queue
from typer.testing import CliRunner

from gateway.cli import app
from gateway.queue import DeadLetters, DrainOptions, GroupQueue, Keys, parse_entry
from tests.pipeline.conftest import Valkey, write_config


def entry(seq: int, mid: str) -> str:
    return f"{seq} " + json.dumps({"engaged": True, "msg": {"message_id": mid, "text": mid,
                                                            "sender_name": "ada"}})


def test_retry_in_order_once_and_drop(tmp_path: Path, valkey: Valkey) -> None:
    r = redis.Redis.from_url(valkey.url)
    keys, group = Keys(), "local:ada"
    gq = GroupQueue(r, keys, group)
    gq.dead_letter([entry(1, "a"), entry(2, "b")], turn_id="turn-1", why="2 attempts; x")
    gq.dead_letter([entry(4, "d")], turn_id="turn-2", why="2 attempts; y")
    r.hset(keys.turn("turn-1"), mapping={"published": "1", "attempts": "3"})
    r.set(keys.sent("turn-1", 0), "1")
    r.rpush(keys.mailbox(group), entry(5, "e"))  # a newer message already waiting
    dead = DeadLetters(r, keys)
    assert dead.counts() == {group: 3}
    assert [rec.why for rec in dead.records(group)] == ["2 attempts; x", "2 attempts; y"]
    assert [e.msg["message_id"] for e in dead.entries(group)] == ["a", "b", "d"]

    assert dead.retry(group, DrainOptions()) == 3
    waiting = sorted((parse_entry(x) for x in r.lrange(keys.mailbox(group), 0, -1)),
                     key=lambda e: e.seq)
    assert [e.msg["message_id"] for e in waiting] == ["a", "b", "d", "e"]
    assert not r.exists(keys.turn("turn-1"), keys.sent("turn-1", 0), keys.dead(group),
                        keys.dead_log(group))
    lease = r.get(keys.lease(group))
    assert lease is not None
    queue = Queue(DrainOptions().queue, connection=r, serializer="json")
    assert queue.job_ids == [lease.decode()]
    assert dead.retry(group, DrainOptions()) == 0  # once
    assert len(queue.job_ids) == 1

    gq.dead_letter([entry(6, "f")], why="unreadable batch")
    config = write_config(tmp_path / "c.toml", valkey.url)
    runner = CliRunner()
    refused = runner.invoke(app, ["dead", "drop", group, "--config", str(config)], input="n\n")
    assert refused.exit_code == 1 and dead.counts() == {group: 1}
    dropped = runner.invoke(app, ["dead", "drop", group, "--config", str(config)],
                            input="y\n")
    assert dropped.exit_code == 0 and "1 message(s) dropped" in dropped.output
    assert dead.counts() == {}
    listing = runner.invoke(app, ["dead", "list", "--config", str(config)])
    assert listing.exit_code == 0 and "no dead letters" in listing.output
    r.close()


def test_a_retried_turn_with_no_error_is_a_crash_loop_in_status(tmp_path: Path,
                                                                 valkey: Valkey) -> None:
    from gateway.operations import status_checks

    r = redis.Redis.from_url(valkey.url)
    keys = Keys()
    GroupQueue(r, keys, "local:bob").note_retry("turn-9", 3)
    failing = GroupQueue(r, keys, "local:eve")
    failing.record_error("turn-7", "TurnError", "provider said 500")
    failing.note_retry("turn-7", 2)
    by_group = {t.group: t for t in DeadLetters(r, keys).retrying()}
    assert by_group["local:bob"].crashed and by_group["local:bob"].attempts == 3
    assert not by_group["local:eve"].crashed
    checks = {c.name: c for c in status_checks(write_config(tmp_path / "c.toml", valkey.url),
                                               model=False)}
    assert "crash loop" in checks["turn local:bob"].detail
    assert "provider said 500" in checks["turn local:eve"].detail
    GroupQueue(r, keys, "local:bob").clear_retry()
    assert [t.group for t in DeadLetters(r, keys).retrying()] == ["local:eve"]
    r.close()

"""Fact extraction after each turn (issue 13), against a real Valkey, the real memory_store,
the real drain job and a real RQ worker running the job by its import path, with a
scripted structured-output model (``tests/pipeline/extract_model.py``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry

from channels.models import Inbound
from gateway.config import Settings, load_worker_settings
from gateway.queue import EXTRACT_JOB, Keys
from memory_store import BaseMemory, open_memory
from tests.configs import settings_from_mapping
from workers import context, drain
from workers.agent import clear_agent_cache
from workers.context import WorkerContext
from workers.extraction import (
    MAX_ATTEMPTS,
    edit_extraction_entry,
    extract_group,
    extraction_enabled,
    extraction_entry,
)
from workers.turn import parse_batch

from . import extract_model
from .conftest import ROOT, Stack, Valkey, write_config

K = Keys()
GROUP = "local:c1"


@dataclass
class Env:
    url: str
    r: redis.Redis
    config: Path
    data_dir: Path

    def settings(self) -> Settings:
        return load_worker_settings(self.config)

    def memory(self) -> BaseMemory:
        return open_memory(self.data_dir, GROUP, backend="file", watch="poll")

    def group_dir(self) -> Path:
        return self.data_dir / "groups" / "local" / "c1"


def config(path: Path, url: str, extract: str = "true",
           model: str = "tests.pipeline.extract_model:model") -> Path:
    write_config(path, url)
    text = path.read_text(encoding="utf-8")
    text = text.replace('backend = "file"', f'backend = "file"\nextract = {extract}')
    text = text.replace('function = "tests.pipeline.scripted:model"', f'function = "{model}"')
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def env(tmp_path: Path, valkey: Valkey, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    path = config(tmp_path / "pnc.toml", valkey.url)
    monkeypatch.setenv("PYNANOCLAW_CONFIG", str(path))
    context.install(None)
    clear_agent_cache()
    extract_model.CALLS.clear()
    extract_model.CITE.clear()
    r = redis.Redis.from_url(valkey.url)
    yield Env(valkey.url, r, path, tmp_path / "data")
    context.install(None)
    clear_agent_cache()
    r.close()


_seq = [0]


def say(r: redis.Redis, mid: str, text: str, *, sender: str = "u1", name: str = "Alice",
        forwarded_from: str | None = None, admin: bool = False) -> None:
    _seq[0] += 1
    msg = Inbound(channel="local", chat_id="c1", is_group=True, sender_id=sender,
                  sender_name=name, message_id=mid, text=text, mentions_bot=True,
                  forwarded_from=forwarded_from, is_admin=admin)
    r.rpush(K.mailbox(GROUP), json.dumps({"seq": _seq[0], "engaged": True,
                                          "msg": json.loads(msg.model_dump_json())}))


def turn(e: Env) -> list[bytes]:
    """One drain job (its turn published), then the queue's jobs: the extraction.
    Returns what the turn queued for extraction."""
    assert drain.drain_group(GROUP, redis_url=e.url, lock_ttl=10, lease_ttl=10)["turns"] == 1
    queued: list[bytes] = e.r.lrange(K.extractions(GROUP), 0, -1)  # type: ignore[assignment]
    q = Queue("pnc-drain.background", connection=e.r, serializer="json")
    assert [j.func_name for j in q.jobs] == [EXTRACT_JOB]
    SimpleWorker([q], connection=e.r, serializer="json").work(burst=True)
    return queued


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".index" not in p.parts}


def test_a_move_is_filed_then_superseded_by_the_next_one(env: Env) -> None:
    say(env.r, "m1", "Alice moved to Lisbon")
    turn(env)
    alice = env.group_dir() / "entities" / "entity-alice.md"
    assert alice.exists()
    with closing(env.memory()) as mem:
        entity = mem.read_sync("entity-alice")
        [lisbon] = mem.records({"kind": "entity", "include_superseded": True,
                                "source": "local:c1:msg/m1"})
    assert "- Alice moved to Lisbon (local:c1:msg/m1, " in entity.content
    assert "trust 0.50)" in entity.content  # a member's own words: member trust
    assert entity.metadata["entity"] == "Alice" and entity.trust == 0.5
    assert lisbon.content == "Alice moved to Lisbon" and lisbon.metadata["message_ids"] == ["m1"]
    assert not env.r.exists(K.extracting(GROUP), K.extractions(GROUP))

    say(env.r, "m2", "I moved to Porto")
    turn(env)
    assert "Alice moved to Lisbon" in extract_model.CALLS[-1]  # the model saw what is known
    with closing(env.memory()) as mem:
        old = mem.read_sync(lisbon.id)
        [porto] = mem.records({"kind": "entity", "include_superseded": True,
                               "source": "local:c1:msg/m2"})
        entity = mem.read_sync("entity-alice")
        found = mem.search_sync("where did Alice move", k=5)
    assert old.valid_to is not None and old.metadata["superseded_by"] == porto.id
    assert old.metadata["superseded_reason"] == "contradicted"
    live, _, history = entity.content.partition("### Superseded")
    assert "Alice moved to Porto (local:c1:msg/m2" in live and "Lisbon" not in live
    assert "~~Alice moved to Lisbon~~" in history
    assert found[0].id == "entity-alice"  # search finds the file that says Porto
    with closing(env.memory()) as mem:
        history_search = mem.search_sync("Alice moved Lisbon", k=10,
                                         filters={"include_superseded": True})
    assert lisbon.id in [r.id for r in history_search]  # the history is kept


def test_a_retried_turn_or_job_writes_nothing_twice(env: Env) -> None:
    say(env.r, "m1", "Alice moved to Lisbon")
    [entry] = turn(env)
    tid = json.loads(entry)["turn_id"]
    calls = len(extract_model.CALLS)
    before = snapshot(env.group_dir())
    # the same turn queued again (a retried turn), and a job retried after it wrote
    # everything but before it marked the turn done (the model's answer is stored)
    env.r.rpush(K.extractions(GROUP), entry, entry)
    env.r.hdel(K.extraction(tid), "done")
    result = extract_group(GROUP, redis_url=env.url)
    assert result["end"] == "extracted" and result["turns"] == 1
    assert len(extract_model.CALLS) == calls  # the stored answer, not a new request
    assert snapshot(env.group_dir()) == before  # not a byte changed, audit log included
    assert env.r.hget(K.extraction(tid), "done") == b"1"
    env.r.rpush(K.extractions(GROUP), entry)
    assert extract_group(GROUP, redis_url=env.url)["turns"] == 0  # done: nothing to do
    assert snapshot(env.group_dir()) == before and not env.r.exists(K.extractions(GROUP))
    entity = (env.group_dir() / "entities" / "entity-alice.md").read_text(encoding="utf-8")
    assert entity.split("\n---\n", 1)[1].count("Alice moved to Lisbon") == 1  # the body


def test_a_members_claim_about_another_member_stays_out_of_the_profile(env: Env) -> None:
    profile = env.group_dir() / "user_profile.md"
    say(env.r, "m1", "Bob is vegan, by the way")
    turn(env)
    with closing(env.memory()) as mem:
        bob = mem.read_sync("entity-bob")
    assert "- Bob is vegan (local:c1:msg/m1, " in bob.content and bob.trust == 0.5
    assert "vegan" not in (profile.read_text(encoding="utf-8") if profile.exists() else "")
    assert not (env.group_dir() / "entities" / "entity-alice.md").exists()


def test_trust_comes_from_the_messages_never_from_the_models_citation(env: Env) -> None:
    # an admin forwards somebody's text; the model cites the admin's own message
    extract_model.CITE["id"] = "m1"
    say(env.r, "m1", "see below", sender="u9", name="Ada", admin=True)
    say(env.r, "m2", "Carol moved to Paris", sender="u9", name="Ada", admin=True,
        forwarded_from="Someone")
    turn(env)
    with closing(env.memory()) as mem:
        carol = mem.read_sync("entity-carol")
    assert carol.trust == 0.2  # quoted trust: the words are only in the forward
    assert "Carol moved to Paris (local:c1:msg/m1,m2, " in carol.content


def test_a_queued_drain_makes_the_job_reschedule_not_the_turn_wait(env: Env) -> None:
    say(env.r, "m1", "Alice moved to Lisbon")
    assert drain.drain_group(GROUP, redis_url=env.url, lock_ttl=10, lease_ttl=10)["turns"] == 1
    env.r.set(K.lease(GROUP), "drain-job-id", px=60_000)  # a drain is queued
    before = snapshot(env.group_dir())
    result = extract_group(GROUP, redis_url=env.url, job_timeout=99)
    assert result["end"] == "rescheduled" and snapshot(env.group_dir()) == before
    assert extract_model.CALLS == []  # not even the model was asked
    assert not env.r.exists(K.lock(GROUP)) and env.r.get(K.lease(GROUP)) == b"drain-job-id"
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    scheduled = ScheduledJobRegistry(queue=q)  # type: ignore[no-untyped-call]
    assert scheduled.get_job_ids() == [result["job"]]
    job = q.fetch_job(result["job"])
    assert job is not None and job.kwargs["reschedules"] == 1 and job.timeout == 99
    assert env.r.get(K.extracting(GROUP)) == result["job"].encode()
    assert env.r.llen(K.extractions(GROUP)) == 1  # the turn still waits for extraction
    # the drain is done; the rescheduled job (made due now) extracts
    env.r.delete(K.lease(GROUP))
    for j in list(q.jobs):  # the job the turn enqueued
        q.remove(j)
    q.enqueue_job(job)
    scheduled.remove(job)
    SimpleWorker([q], connection=env.r, serializer="json").work(burst=True)
    assert (env.group_dir() / "entities" / "entity-alice.md").exists()
    assert not env.r.exists(K.extracting(GROUP), K.extractions(GROUP))


def test_turns_that_come_fast_are_extracted_by_one_job(env: Env) -> None:
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    for mid, text in [("m1", "Alice moved to Lisbon"), ("m2", "Bob is vegan")]:
        say(env.r, mid, text)
        assert drain.drain_group(GROUP, redis_url=env.url, lock_ttl=10, lease_ttl=10)["turns"] == 1
    assert [j.func_name for j in q.jobs] == [EXTRACT_JOB]  # the second found it pending
    assert env.r.llen(K.extractions(GROUP)) == 2
    SimpleWorker([q], connection=env.r, serializer="json").work(burst=True)
    assert len(extract_model.CALLS) == 2 and q.count == 0
    entities = env.group_dir() / "entities"
    assert (entities / "entity-alice.md").exists() and (entities / "entity-bob.md").exists()
    assert not env.r.exists(K.extracting(GROUP), K.extractions(GROUP))


def test_a_model_that_cannot_answer_is_given_up_on_never_a_crash(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # a scripted model that answers text only: no structured output, ever
    path = config(tmp_path / "text.toml", env.url, model="tests.pipeline.scripted:model")
    monkeypatch.setenv("PYNANOCLAW_CONFIG", str(path))
    context.install(None)
    say(env.r, "m1", "Alice moved to Lisbon")
    assert drain.drain_group(GROUP, redis_url=env.url, lock_ttl=10, lease_ttl=10)["turns"] == 1
    [entry] = env.r.lrange(K.extractions(GROUP), 0, -1)
    tid = json.loads(entry)["turn_id"]
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    with caplog.at_level(logging.WARNING, logger="workers.extraction"):
        # each failed attempt leaves the turn queued and a fresh job for it
        SimpleWorker([q], connection=env.r, serializer="json").work(burst=True)
    assert env.r.hget(K.extraction(tid), "done") == b"gave-up"
    assert int(env.r.hget(K.extraction(tid), "attempts") or 0) == MAX_ATTEMPTS
    assert len([r for r in caplog.records if "extraction of" in r.getMessage()]) == MAX_ATTEMPTS
    assert q.count == 0 and len(q.failed_job_registry) == 0  # no job crashed
    assert not env.r.exists(K.extracting(GROUP), K.extractions(GROUP))
    assert not (env.group_dir() / "entities").exists() or not list(
        (env.group_dir() / "entities").iterdir())


def test_a_local_model_skips_with_one_log_line(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = config(tmp_path / "local.toml", env.url, model="unused")
    path.write_text(path.read_text(encoding="utf-8").replace(
        'provider = "function"', 'provider = "local"'), encoding="utf-8")
    settings = load_worker_settings(path)
    assert extraction_enabled(settings) == (
        False, "the local model cannot do structured output")
    env.r.rpush(K.extractions(GROUP), "left by an earlier config")
    ctx = WorkerContext(settings, redis.Redis.from_url(env.url))
    with caplog.at_level(logging.DEBUG, logger="workers"):
        result = extract_group(GROUP, ctx=ctx)
    assert result["end"] == "skipped"
    assert [r.getMessage() for r in caplog.records] == [
        "fact extraction of local:c1 skipped: the local model cannot do structured output"]
    assert not env.r.exists(K.extractions(GROUP))
    assert not (env.data_dir / "groups").exists()  # never opened a group, nor a model
    batch = parse_batch(GROUP, [json.dumps({"seq": 1, "engaged": True, "msg": json.loads(
        Inbound(channel="local", chat_id="c1", is_group=True, sender_id="u1", sender_name="A",
                message_id="x", text="hi").model_dump_json())})])
    assert extraction_entry(settings, batch) is None  # the drain queues nothing
    ctx.redis.close()


def test_extract_setting_auto_follows_the_provider() -> None:
    def enabled(model: dict[str, object], extract: object = "auto") -> bool:
        s = settings_from_mapping({"model": model, "memory": {"extract": extract}},
                                  {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"})
        return extraction_enabled(s)[0]

    assert enabled({"provider": "anthropic", "name": "claude-sonnet-4-5"})
    assert enabled({"provider": "openai", "name": "gpt-4.1-mini"})
    assert not enabled({"provider": "openai", "name": "x", "tools": False}, True)
    assert not enabled({"provider": "function", "function": "m:x"})
    assert enabled({"provider": "function", "function": "m:x"}, True)
    assert not enabled({"provider": "anthropic", "name": "x"}, False)
    example = ROOT / "deploy" / "pynanoclaw.example.toml"
    assert "extract" in example.read_text(encoding="utf-8")
    assert load_worker_settings(example, env={}).memory.extract == "auto"


async def test_workers_extract_after_the_reply_end_to_end(tmp_path: Path, valkey: Valkey) -> None:
    """Real worker processes and the gateway: the reply comes, then a worker runs the
    extraction job by its import path and the entity file appears."""
    stack = Stack(tmp_path, valkey)
    config(stack.config_path, valkey.url)
    alice = stack.data_dir / "groups" / "local" / "c1" / "entities" / "entity-alice.md"
    try:
        stack.start_workers(1)
        await stack.start_gateway()
        assert (await stack.ask("c1", "u1", "Alice moved to Lisbon")).reply == "ok"
        await stack.wait_for(lambda: alice.exists() and not stack.r.exists(
            K.extracting(GROUP), K.extractions(GROUP)), what="the extraction to run")
    finally:
        await stack.close()
    assert "- Alice moved to Lisbon (local:c1:msg/" in alice.read_text(encoding="utf-8")


async def test_an_edit_is_extracted_in_place_of_its_old_words(tmp_path: Path,
                                                              valkey: Valkey) -> None:
    """An answered "Alice moved to Lisbon" edited to "... Porto": the redaction job
    retires the Lisbon fact and queues the new words for extraction, which files Porto
    citing the same message; the edit redelivered is extracted once."""
    stack = Stack(tmp_path, valkey)
    config(stack.config_path, valkey.url)
    alice = stack.data_dir / "groups" / "local" / "c1" / "entities" / "entity-alice.md"
    try:
        stack.start_workers(1)
        gw = await stack.start_gateway()
        assert gw.inbox is not None
        assert (await stack.ask("c1", "u1", "Alice moved to Lisbon", message_id="m1")
                ).reply == "ok"
        await stack.wait_for(lambda: alice.exists() and not stack.r.exists(
            K.extracting(GROUP), K.extractions(GROUP)), what="the first extraction")
        edit = Inbound(channel="local", chat_id="c1", is_group=False, sender_id="u1",
                       sender_name="u1", message_id="m1:edit:1", text="Alice moved to Porto",
                       kind="edit", original_id="m1")
        assert await gw.inbox.accept(edit) == "recorded"
        await stack.wait_for(lambda: "Porto" in alice.read_text(encoding="utf-8") and
                             not stack.r.exists(K.changes(GROUP), K.extracting(GROUP),
                                                K.extractions(GROUP)),
                             what="the edit's extraction")
        assert await gw.inbox.accept(edit) == "duplicate"
    finally:
        await stack.close()
    root = stack.data_dir / "groups" / "local" / "c1"
    text = alice.read_text(encoding="utf-8")
    assert text.count("- Alice moved to Porto (local:c1:msg/m1,") == 1
    assert not [p for p in root.rglob("*") if p.is_file() and b"Lisbon" in p.read_bytes()]


def test_an_edit_recorded_by_an_older_gateway_is_not_extracted(env: Env) -> None:
    record = {"kind": "edit", "channel": "local", "account": "default", "chat_id": "c1",
              "original_id": "m1", "event_id": "m1:edit:1", "sender_id": "u1",
              "at": "2026-12-01T10:00:00+00:00", "text": "Alice moved to Porto"}
    assert edit_extraction_entry(env.settings(), GROUP, record) is None  # no is_group
    entry = edit_extraction_entry(env.settings(), GROUP,
                                  {**record, "is_group": False, "sender_name": "Una"})
    assert entry is not None
    item = json.loads(entry)
    batch = parse_batch(GROUP, item["entries"], item["revision"])
    assert batch.turn_id == item["turn_id"] and batch.messages[0].message_id == "m1"
    # another turn than the original message's own
    assert batch.turn_id != parse_batch(GROUP, item["entries"]).turn_id

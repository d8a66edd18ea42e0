"""Consolidation scheduling and job, and reflection on failed turns, against a real
Valkey, the real memory_store and (for the end-to-end test) real worker processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry

from channels.models import Inbound
from gateway.config import (
    ConfigError,
    Settings,
    load_worker_settings,
)
from gateway.queue import CONSOLIDATE_JOB, Keys
from memory_store import BaseMemory, open_memory
from tests.configs import settings_from_mapping
from workers import context, drain
from workers.agent import TurnError, clear_agent_cache
from workers.maintenance import (
    PENDING_TTL,
    after_episodes,
    consolidate_group,
    consolidation_due,
    schedule_consolidation,
)
from workers.reflection import reflect_on_failure
from workers.turn import turn_id_for

from .conftest import ROOT, Stack, Valkey, write_config
from .maint_model import KEY_ENV

K = Keys()
GROUP = "local:c1"
FAKE_KEY = "sk-fake-0123456789abcdefFAKEKEYxyz"


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


def config_text(path: Path, url: str, every: int, model: str = "tests.pipeline.maint_model:model"
                ) -> Path:
    write_config(path, url)
    text = path.read_text(encoding="utf-8")
    text = text.replace('backend = "file"', f'backend = "file"\nconsolidate_every = {every}')
    text = text.replace('function = "tests.pipeline.scripted:model"',
                        f'function = "{model}"\napi_key_env = "{KEY_ENV}"')
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def env(tmp_path: Path, valkey: Valkey, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    path = config_text(tmp_path / "pnc.toml", valkey.url, every=3)
    monkeypatch.setenv("PYNANOCLAW_CONFIG", str(path))
    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    monkeypatch.setenv("PNC_TEST_REDIS_URL", valkey.url)
    context.install(None)
    clear_agent_cache()
    r = redis.Redis.from_url(valkey.url)
    yield Env(valkey.url, r, path, tmp_path / "data")
    context.install(None)
    clear_agent_cache()
    r.close()


def push(r: redis.Redis, mids: list[str], text: str = "hi") -> None:
    for i, mid in enumerate(mids, 1):
        msg = Inbound(channel="local", chat_id="c1", is_group=False, sender_id="u1",
                      sender_name="Una", message_id=mid, text=f"{text} {mid}")
        r.rpush(K.mailbox(GROUP), json.dumps({"seq": i, "engaged": True,
                                              "msg": json.loads(msg.model_dump_json())}))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` except the derived index, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".index" not in p.parts}


def seed_duplicates(e: Env) -> None:
    with closing(e.memory()) as mem:
        mem.write_sync("Ann prefers green tea", kind="fact",
                        metadata={"id": "f-keep", "source": "local:c1:msg/1", "trust": 0.8})
        mem.write_sync("ann prefers green tea!", kind="fact",
                        metadata={"id": "f-dup", "source": "local:c1:msg/2", "trust": 0.6})
        mem.write_sync("The repo lives on the shared NAS", kind="fact",
                        metadata={"id": "f-other", "source": "local:c1:msg/3", "trust": 0.6})


def assert_merged(e: Env) -> None:
    with closing(e.memory()) as mem:
        dup, keep, other = mem.read_sync("f-dup"), mem.read_sync("f-keep"), mem.read_sync("f-other")
    assert dup.valid_to is not None and dup.metadata["superseded_by"] == "f-keep"
    assert keep.valid_to is None and keep.metadata["merged_from"] == ["f-dup"]
    assert other.valid_to is None and "merged_from" not in other.metadata


def run_queue(e: Env) -> None:
    q = Queue("pnc-drain.background", connection=e.r, serializer="json")
    SimpleWorker([q], connection=e.r, serializer="json").work(burst=True)


# -- policy ----------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "every", "due"), [
    (0, 50, False), (49, 50, False), (50, 50, True), (51, 50, True), (7, 1, True),
    (1000, 0, False), (5, -1, False),
])
def test_consolidation_due(count: int, every: int, due: bool) -> None:
    assert consolidation_due(count, every) is due


def test_consolidate_every_setting_defaults_validates_and_is_in_the_example() -> None:
    assert settings_from_mapping({}, {}).memory.consolidate_every == 50
    assert settings_from_mapping({"memory": {"consolidate_every": 0}}, {}) \
        .memory.consolidate_every == 0
    with pytest.raises(ConfigError, match=r"memory\.consolidate_every: input should be greater"):
        settings_from_mapping({"memory": {"consolidate_every": -1}}, {})
    with pytest.raises(ConfigError, match=r"memory\.consolidate_every: input should be a valid"):
        settings_from_mapping({"memory": {"consolidate_every": "often"}}, {})
    example = ROOT / "deploy" / "pynanoclaw.example.toml"
    assert "consolidate_every" in example.read_text(encoding="utf-8")
    assert load_worker_settings(example, env={}).memory.consolidate_every == 50


def test_function_model_key_is_resolved_when_named(env: Env) -> None:
    settings = env.settings()
    assert settings.model.api_key is not None
    assert settings.model.api_key.get_secret_value() == FAKE_KEY
    assert FAKE_KEY not in repr(settings)


# -- scheduling ------------------------------------------------------------------------


def test_scheduled_after_n_episodes_and_at_most_one_pending(env: Env) -> None:
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    for _ in range(2):
        env.r.incr(K.episodes(GROUP))
        assert schedule_consolidation(env.r, GROUP, every=3, job_timeout=77) is None
    env.r.incr(K.episodes(GROUP))
    job_id = schedule_consolidation(env.r, GROUP, every=3, job_timeout=77, lock_ttl=2)
    assert job_id is not None and q.job_ids == [job_id]
    job = q.jobs[0]
    assert job.func_name == CONSOLIDATE_JOB and job.kwargs["group"] == GROUP
    assert job.timeout == 77 and job.retries_left == 2 and job.kwargs["lock_ttl"] == 2
    assert env.r.get(K.consolidating(GROUP)) == job_id.encode()
    assert 0 < env.r.ttl(K.consolidating(GROUP)) <= PENDING_TTL
    # still due, but one is pending: no second job however many episodes follow
    for _ in range(5):
        env.r.incr(K.episodes(GROUP))
        assert schedule_consolidation(env.r, GROUP, every=3) is None
    assert q.count == 1
    # off means off
    env.r.delete(K.consolidating(GROUP))
    assert schedule_consolidation(env.r, GROUP, every=0) is None and q.count == 1


def test_after_episodes_schedules_when_due_and_never_raises(env: Env) -> None:
    settings = env.settings()  # consolidate_every = 3
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    kw = {"queue": "pnc-drain", "prefix": "pnc:", "lock_ttl": 2.0}
    assert [after_episodes(env.r, GROUP, settings, n, **kw) for n in (1, 2)] == [None, None]
    job_id = after_episodes(env.r, GROUP, settings, 3, **kw)
    assert job_id is not None and q.job_ids == [job_id]
    assert q.jobs[0].timeout == settings.worker.job_timeout
    off = settings.model_copy(update={"memory": settings.memory.model_copy(
        update={"consolidate_every": 0})})
    assert after_episodes(env.r, "local:other", off, 9, **kw) is None and q.count == 1
    broken = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    assert after_episodes(broken, "local:other", settings, 3, **kw) is None


def test_job_consolidates_duplicates_then_clears_pending_and_counter(env: Env) -> None:
    seed_duplicates(env)
    for _ in range(3):
        env.r.incr(K.episodes(GROUP))
    assert schedule_consolidation(env.r, GROUP, every=3) is not None
    run_queue(env)  # a real RQ worker (in this process) runs the job by its import path
    assert_merged(env)
    assert not env.r.exists(K.consolidating(GROUP))
    assert int(env.r.get(K.episodes(GROUP)) or 0) == 0
    # the job never touched the drain lease: the inbox must still enqueue drains
    assert not env.r.exists(K.lease(GROUP), K.lock(GROUP))
    before = snapshot(env.group_dir())
    again = consolidate_group(GROUP, redis_url=env.url)
    assert again == {"group": GROUP, "end": "consolidated", "changed": 0}
    assert {k: v for k, v in snapshot(env.group_dir()).items() if k != ".meta/audit.jsonl"} == \
        {k: v for k, v in before.items() if k != ".meta/audit.jsonl"}


def test_job_never_runs_while_a_turn_holds_the_lock(env: Env) -> None:
    seed_duplicates(env)
    env.r.set(K.consolidating(GROUP), "first-job", ex=PENDING_TTL)
    env.r.set(K.lock(GROUP), "a-turn", px=60_000)
    before = snapshot(env.group_dir())
    result = consolidate_group(GROUP, redis_url=env.url, job_timeout=99)
    assert result["end"] == "rescheduled"
    assert snapshot(env.group_dir()) == before  # not a byte changed, audit log included
    assert env.r.get(K.lock(GROUP)) == b"a-turn"  # the turn's lock is untouched
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    scheduled = ScheduledJobRegistry(queue=q)  # type: ignore[no-untyped-call]
    assert scheduled.get_job_ids() == [result["job"]] and q.count == 0
    job = q.fetch_job(result["job"])
    assert job is not None and job.kwargs["reschedules"] == 1 and job.timeout == 99
    assert env.r.get(K.consolidating(GROUP)) == result["job"].encode()
    # the turn ends; the rescheduled job (made due now) consolidates
    env.r.delete(K.lock(GROUP))
    q.enqueue_job(job)
    scheduled.remove(job)
    run_queue(env)
    assert_merged(env)
    assert not env.r.exists(K.consolidating(GROUP))


@pytest.mark.parametrize("waiting", ["lease", "mailbox"])
def test_job_yields_to_a_queued_drain_or_waiting_messages(env: Env, waiting: str) -> None:
    seed_duplicates(env)
    if waiting == "lease":
        env.r.set(K.lease(GROUP), "drain-job-id", px=60_000)
    else:
        push(env.r, ["w1"])
    before = snapshot(env.group_dir())
    result = consolidate_group(GROUP, redis_url=env.url)
    assert result["end"] == "rescheduled" and snapshot(env.group_dir()) == before
    assert not env.r.exists(K.lock(GROUP))  # never took the lock from the coming turn
    if waiting == "lease":
        assert env.r.get(K.lease(GROUP)) == b"drain-job-id"


def test_a_group_busy_for_too_long_is_left_for_the_next_due_run(env: Env) -> None:
    from workers.maintenance import MAX_RESCHEDULES

    seed_duplicates(env)
    env.r.set(K.consolidating(GROUP), "x", ex=PENDING_TTL)
    env.r.set(K.lock(GROUP), "a-turn", px=60_000)
    result = consolidate_group(GROUP, redis_url=env.url, reschedules=MAX_RESCHEDULES)
    assert result["end"] == "gave-up"
    assert not env.r.exists(K.consolidating(GROUP))  # the next due turn may schedule
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    registry = ScheduledJobRegistry(queue=q)  # type: ignore[no-untyped-call]
    assert registry.count == 0


# -- reflection ------------------------------------------------------------------------


def all_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*")
                     if p.is_file())


async def test_reflection_scrubs_the_key_and_writes_once_per_turn(env: Env) -> None:
    settings = env.settings()
    tid = turn_id_for(GROUP, ["local:default:c1:m1"])
    # as if a provider error slipped past the agent's scrubbing, key and all
    err = TurnError(f"AuthenticationError: key {FAKE_KEY} rejected", transient=False)
    async with env.memory() as mem:
        first = await reflect_on_failure(env.r, mem, settings, group=GROUP,
                                         turn_id=tid, message_ids=["m1"], error=err, attempts=1)
        again = await reflect_on_failure(env.r, mem, settings, group=GROUP,
                                         turn_id=tid, message_ids=["m1"], error=err, attempts=2)
        dead = await reflect_on_failure(env.r, mem, settings, group=GROUP,
                                        turn_id=tid, message_ids=["m1"], attempts=5, dead=True)
        lessons = mem.records({"kind": "reflection"})
    assert first is not None and again is None and dead is None
    assert [r.id for r in lessons] == [first]
    assert lessons[0].metadata["turn_id"] == tid
    # the scripted model echoed the report: it carried what failed, without the key
    assert "AuthenticationError" in lessons[0].content and tid in lessons[0].content
    assert int(env.r.get("test:reflect-calls") or 0) == 1  # a retry does not ask again
    assert not env.r.exists("test:reflect-saw-key")  # the model never saw the key either
    files = list((env.group_dir() / "reflections").glob("*.md"))
    assert len(files) == 1
    assert FAKE_KEY not in all_text(env.group_dir())
    assert FAKE_KEY[:12] not in all_text(env.group_dir())
    assert FAKE_KEY not in repr(env.r.hgetall(K.turn(tid)))


async def test_transient_failure_is_reflected_only_when_dead_lettered(env: Env) -> None:
    settings = env.settings()
    tid = "turn-transient"
    err = TurnError("ModelHTTPError: status_code: 429, model_name: x", transient=True)
    async with env.memory() as mem:
        assert await reflect_on_failure(env.r, mem, settings, group=GROUP,
                                        turn_id=tid, message_ids=["m1"], error=err) is None
        assert mem.records({"kind": "reflection"}) == []
        lesson = await reflect_on_failure(env.r, mem, settings, group=GROUP,
                                          turn_id=tid, message_ids=["m1"], attempts=5,
                                          dead=True)
        rec = await mem.read(lesson or "-")
    assert "429" in rec.content and "gave up" in rec.content  # the stored error, named


async def test_reflection_falls_back_to_the_rule_when_the_model_fails(
    tmp_path: Path, valkey: Valkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a model that fails every request, the reflection included
    path = config_text(tmp_path / "pnc.toml", valkey.url, every=0,
                       model="tests.pipeline.maint_model:model")
    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    settings = load_worker_settings(path)
    clear_agent_cache()
    monkeypatch.setattr("workers.reflection.build_agent", _broken_agent)
    r = redis.Redis.from_url(valkey.url)
    async with open_memory(tmp_path / "data", GROUP, backend="file") as mem:
        lesson = await reflect_on_failure(
            r, mem, settings, group=GROUP, turn_id="turn-x",
            message_ids=["m9"], error=TurnError(f"RuntimeError: boom {FAKE_KEY}",
                                                transient=False))
        rec = await mem.read(lesson or "-")
    assert rec.content.startswith("When answering in local:c1") and "boom ***" in rec.content
    assert FAKE_KEY not in all_text(tmp_path / "data")
    r.close()


class _Failing:
    @property
    def model(self) -> object:
        from pydantic_ai.messages import ModelMessage, ModelResponse
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        def fail(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            raise RuntimeError(f"model down, key {FAKE_KEY}")

        return FunctionModel(fail, model_name="down")


def _broken_agent(_settings: Settings) -> _Failing:
    return _Failing()


async def test_reflection_never_raises(env: Env) -> None:
    settings = env.settings()

    class Broken(redis.Redis):
        def hset(self, *a: object, **k: object) -> int:  # type: ignore[override]
            raise redis.ConnectionError(f"down {FAKE_KEY}")

    broken = Broken.from_url(env.url)
    async with env.memory() as mem:
        assert await reflect_on_failure(
            broken, mem, settings, group=GROUP, turn_id="t", message_ids=[],
            error=TurnError("x", transient=False)) is None
    broken.close()


# -- the hooks in the drain job and the turn ---------------------------------------------


def test_drain_schedules_consolidation_after_n_episodes(env: Env) -> None:
    seed_duplicates(env)
    q = Queue("pnc-drain.background", connection=env.r, serializer="json")
    for i in range(3):
        assert q.count == 0
        push(env.r, [f"m{i}"])
        assert drain.drain_group(GROUP, redis_url=env.url, lock_ttl=10, lease_ttl=10)["turns"] == 1
    assert int(env.r.get(K.episodes(GROUP)) or 0) == 3
    assert [j.func_name for j in q.jobs] == [CONSOLIDATE_JOB]
    push(env.r, ["m3"])
    drain.drain_group(GROUP, redis_url=env.url, lock_ttl=1, lease_ttl=1)
    assert q.count == 1  # one pending at most
    run_queue(env)
    assert_merged(env)
    assert int(env.r.get(K.episodes(GROUP)) or 0) == 0


def test_a_failing_turn_leaves_one_lesson_without_the_key(env: Env) -> None:
    push(env.r, ["f1"], text="please FAIL")
    for _ in range(3):  # the first attempt and two retries of the drain job
        with pytest.raises(TurnError) as info:
            drain.drain_group(GROUP, redis_url=env.url, lock_ttl=1, lease_ttl=1, max_attempts=3)
        assert FAKE_KEY not in str(info.value)
    assert drain.drain_group(GROUP, redis_url=env.url, lock_ttl=1, lease_ttl=1,
                             max_attempts=3)["turns"] == 1  # dead-lettered
    assert env.r.llen(K.dead(GROUP)) == 1
    assert int(env.r.get("test:reflect-calls") or 0) == 1
    lessons = list((env.group_dir() / "reflections").glob("*.md"))
    assert len(lessons) == 1
    body = lessons[0].read_text(encoding="utf-8")
    assert "RuntimeError" in body and "f1" in body
    assert FAKE_KEY not in all_text(env.group_dir()) and FAKE_KEY[-8:] not in all_text(
        env.group_dir())
    assert not list((env.group_dir() / "episodes").rglob("*.md"))  # a failed turn is no episode


def test_a_rate_limited_turn_is_reflected_on_only_when_dead_lettered(env: Env) -> None:
    push(env.r, ["r1"], text="FAIL429")
    for _ in range(2):
        with pytest.raises(TurnError) as info:
            drain.drain_group(GROUP, redis_url=env.url, lock_ttl=1, lease_ttl=1, max_attempts=2)
        assert info.value.transient
    assert not list((env.group_dir() / "reflections").glob("*.md"))  # a retry may succeed
    assert drain.drain_group(GROUP, redis_url=env.url, lock_ttl=1, lease_ttl=1,
                             max_attempts=2)["turns"] == 1  # dead-lettered
    lessons = list((env.group_dir() / "reflections").glob("*.md"))
    assert len(lessons) == 1
    body = lessons[0].read_text(encoding="utf-8")
    assert "429" in body and "gave up" in body and "Attempts: 2" in body


async def test_workers_consolidate_and_reflect_end_to_end(
    tmp_path: Path, valkey: Valkey
) -> None:
    """Real worker processes: the drain job schedules consolidation and a worker runs it
    by its import path; a failing turn, retried by RQ, leaves one scrubbed lesson."""
    stack = Stack(tmp_path, valkey)
    config_text(stack.config_path, valkey.url, every=2)
    e = Env(valkey.url, stack.r, stack.config_path, stack.data_dir)
    try:
        seed_duplicates(e)
        stack.start_workers(1, env={KEY_ENV: FAKE_KEY})
        await stack.start_gateway()
        for i in range(2):
            assert (await stack.ask("c1", "u1", f"hello {i}")).reply == "ok"
        await stack.wait_for(lambda: not stack.r.exists(K.consolidating(GROUP))
                             and int(stack.r.get(K.episodes(GROUP)) or 0) == 0,
                             what="the consolidation to run")
        assert_merged(e)
        assert stack.client is not None
        await stack.client.push(chat_id="c2", user="u1", text="please FAIL", message_id="x1")
        turn = K.turn(turn_id_for("local:c2", ["local:default:c2:x1"]))
        # RQ retries the failed drain job (intervals 1 s, 5 s): a third attempt starts
        # only after the second one (and any reflection in it) finished
        await stack.wait_for(lambda: int(stack.r.hget(turn, "attempts") or 0) >= 3,
                             what="a twice retried turn")
        assert stack.r.hexists(turn, "reflected")
        assert int(stack.r.get("test:reflect-calls") or 0) == 1
    finally:
        await stack.close()
    c2 = stack.data_dir / "groups" / "local" / "c2"
    assert len(list((c2 / "reflections").glob("*.md"))) == 1
    assert FAKE_KEY not in all_text(stack.data_dir)

"""Background jobs (fact extraction, consolidation, redaction) never hold up a turn:
they go to their own RQ queue, turn workers take a waiting turn first, and with fact
extraction on ``pynanoclaw run`` starts a worker for background jobs alone. Against a
real Valkey, real worker processes and a scripted model whose extraction call is held
open until the test lets it go."""

from __future__ import annotations

import os
import sys
import time
import tomllib
from pathlib import Path

import pytest
import redis
from rq import Queue

from gateway.config import ConfigError, background_workers, load_config, parse_config
from gateway.operations import WorkerSupervisor, running_embedded_url, status_checks
from gateway.queue import (
    CONSOLIDATE_JOB,
    DrainOptions,
    Keys,
    background_queue,
    enqueue_drain,
    enqueue_group_job,
    job_queue,
    worker_queues,
)

from .conftest import ROOT, Stack, Valkey
from .test_worker_env import _children, _cmdline, start_run


def test_queue_names() -> None:
    assert background_queue("pnc-drain") == "pnc-drain.background"
    assert background_queue("pnc-drain.background") == "pnc-drain.background"
    assert worker_queues("q") == ["q", "q.background"]  # turns first


def test_background_jobs_have_their_own_queue(valkey: Valkey) -> None:
    r = redis.Redis.from_url(valkey.url)
    drains = job_queue(r, "pnc-drain")
    enqueue_group_job(drains, CONSOLIDATE_JOB, "local:c1", {"queue": "pnc-drain"},
                      timeout=30, retries=0)
    enqueue_drain(drains, "local:c1", DrainOptions())
    assert [j.func_name for j in drains.jobs] == ["workers.drain.drain_group"]
    background = Queue("pnc-drain.background", connection=r, serializer="json")
    assert [j.func_name for j in background.jobs] == [CONSOLIDATE_JOB]
    r.close()


@pytest.mark.parametrize(("text", "count"), [
    ('[model]\nprovider = "anthropic"\nname = "claude"\n', 1),  # extract "auto": on
    ('[model]\nprovider = "local"\n', 0),
    ('[model]\nprovider = "anthropic"\nname = "claude"\n[memory]\nextract = false\n', 0),
    ('[model]\nprovider = "local"\n[queue]\nbackground_workers = 2\n', 2),
    ('[model]\nprovider = "anthropic"\nname = "claude"\n[queue]\nbackground_workers = 0\n', 0),
])
def test_background_workers_follow_extraction(text: str, count: int) -> None:
    assert background_workers(parse_config(tomllib.loads(text))) == count


def test_background_workers_validated() -> None:
    with pytest.raises(ConfigError, match="background_workers"):
        parse_config(tomllib.loads("[queue]\nbackground_workers = -1\n"))


def test_supervisor_runs_each_extra_command(tmp_path: Path) -> None:
    def child(tag: str) -> list[str]:
        return [sys.executable, "-c", f"open({str(tmp_path / tag)!r}, 'a').write('x');"
                "import time; time.sleep(30)"]
    sup = WorkerSupervisor(2, child("turns"), env={}, extra=[child("background")])
    sup.start()
    try:
        deadline = time.monotonic() + 30
        while not ((tmp_path / "turns").exists() and (tmp_path / "background").exists()
                   and len((tmp_path / "turns").read_text()) == 2):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert sup.state()["workers"]["count"] == 3 and sup.alive() == 3
    finally:
        sup.stop(grace=1)
    assert (tmp_path / "background").read_text() == "x"


async def test_a_turn_is_answered_while_extraction_waits_on_its_model(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey)
    text = stack.config_path.read_text(encoding="utf-8")
    text = text.replace('backend = "file"', 'backend = "file"\nextract = true').replace(
        "tests.pipeline.scripted:model", "tests.pipeline.held_extract_model:model")
    stack.config_path.write_text(text, encoding="utf-8")
    stack.config = load_config(stack.config_path)
    try:
        # what `pynanoclaw run` starts with extraction on: a turn worker, a background one
        stack.start_workers(1, queues=worker_queues("pnc-drain"))
        stack.start_workers(1, queues=[background_queue("pnc-drain")])
        await stack.start_gateway()

        def workers_line() -> str:
            return next(c.detail for c in status_checks(stack.config_path, model=False)
                        if c.name == "workers")
        # `pynanoclaw status` tells the two kinds apart (once both registered with RQ)
        await stack.wait_for(
            lambda: workers_line() == "1 alive on queue pnc-drain (+1 for background jobs "
            "only)", 60, "both workers to register")
        first = await stack.ask("d1", "u1", "I moved to Lisbon")
        assert first.reply == "ok"
        await stack.wait_for(lambda: stack.r.exists("test:extracting"), 60,
                             "the extraction's model call to start")
        # the extraction's model call is still open: the next turn must not wait for it
        second = await stack.ask("d1", "u1", "and how are you?", timeout=30)
        assert second.reply == "ok"
        assert not stack.r.exists("test:release")  # never let go before the reply
        stack.r.rpush("test:release", "go")
        entities = stack.data_dir / "groups" / "local" / "d1" / "entities"
        await stack.wait_for(lambda: any(entities.glob("entity-*.md")), 60,
                             "the extracted facts to be written")
        assert "moved to Lisbon" in "".join(p.read_text() for p in entities.glob("*.md"))
    finally:
        await stack.close()


@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc")
def test_run_starts_a_background_worker_when_extraction_is_on(tmp_path: Path) -> None:
    cfg = tmp_path / "pnc.toml"
    cfg.write_text("""data_dir = "data"
[model]
provider = "function"
function = "tests.pipeline.extract_model:model"
[memory]
extract = true
[channels.local]
""")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PNC_TEST_REDIS_URL", None)
    run = start_run(cfg, env)
    try:
        deadline = time.monotonic() + 60
        queues: list[list[str]] = []
        url = None
        # the gateway's heartbeat: every worker process was started before it
        while not (url and redis.Redis.from_url(url).exists(Keys().gateway_alive)):
            assert run.poll() is None and time.monotonic() < deadline, "run did not start"
            url = running_embedded_url(tmp_path / "data" / "redis")
            time.sleep(0.2)
        for pid in _children(run.pid):
            argv = _cmdline(pid)
            if "workers" in argv:
                queues.append([argv[i + 1] for i, a in enumerate(argv) if a == "--queue"])
        # and none for voice notes (issue 28): the local channel never brings one (issue 29)
        assert sorted(queues) == [["pnc-drain", "pnc-drain.background"],
                                  ["pnc-drain.background"]]
    finally:
        run.terminate()
        run.wait(timeout=60)

"""The background-job skeleton (workers/groupjob.py) under its three jobs, run by RQ's
own worker from jobs queued the way a gateway or worker before the skeleton queued
them: by their old import paths, with their old keyword arguments (jobs waiting in
Redis across an upgrade), against a real Valkey."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry

from gateway.queue import Keys
from workers import context
from workers.agent import clear_agent_cache

from .conftest import Valkey
from .test_extraction import config

K = Keys()
GROUP = "local:c1"
BACKGROUND = "pnc-drain.background"
#: the paths RQ stored for these jobs before the skeleton (gateway/queue/jobs.py)
OLD_PATHS = {"consolidation": "workers.maintenance.consolidate_group",
             "extraction": "workers.extraction.extract_group",
             "redaction": "workers.redaction.redact_group"}
#: the keyword arguments those jobs were queued with
OLD_KWARGS = {"group": GROUP, "queue": "pnc-drain", "prefix": "pnc:", "lock_ttl": 30.0,
              "job_timeout": 300, "retries": 2, "reschedules": 0}
DONE = {"consolidation": "consolidated", "extraction": "extracted", "redaction": "redacted"}


@pytest.fixture
def r(tmp_path: Path, valkey: Valkey, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    monkeypatch.setenv("PYNANOCLAW_CONFIG", str(config(tmp_path / "pnc.toml", valkey.url)))
    context.install(None)
    clear_agent_cache()
    client = redis.Redis.from_url(valkey.url)
    yield client
    context.install(None)
    clear_agent_cache()
    client.close()


def run_old(r: redis.Redis, job: str, **kwargs: Any) -> dict[str, Any]:
    """Queue ``job`` as the old code did (RQ's plain enqueue, its old path and kwargs)
    and let RQ's worker run it; its summary."""
    q = Queue(BACKGROUND, connection=r, serializer="json")
    queued = q.enqueue_call(OLD_PATHS[job], kwargs={**OLD_KWARGS, **kwargs}, timeout=300)
    SimpleWorker([q], connection=r, serializer="json").work(burst=True)
    queued.refresh()
    assert queued.is_finished, queued.exc_info
    result: dict[str, Any] = queued.return_value()  # type: ignore[assignment]
    return result


@pytest.mark.parametrize("job", list(OLD_PATHS))
def test_an_old_path_job_still_runs(r: redis.Redis, job: str) -> None:
    out = run_old(r, job)
    assert (out["group"], out["end"]) == (GROUP, DONE[job])
    assert not r.exists(K.lock(GROUP), K.consolidating(GROUP), K.extracting(GROUP),
                        K.redacting(GROUP))


@pytest.mark.parametrize("job", list(OLD_PATHS))
def test_a_busy_group_reschedules_the_job_by_its_path(r: redis.Redis, job: str) -> None:
    r.set(K.lease(GROUP), "a-drain", px=60_000)  # a turn is queued: every job yields
    out = run_old(r, job)
    assert out["end"] == "rescheduled"
    [scheduled] = ScheduledJobRegistry(queue=Queue(BACKGROUND, connection=r, serializer="json")
                                       ).get_job_ids()  # type: ignore[no-untyped-call]
    again = Queue(BACKGROUND, connection=r, serializer="json").fetch_job(scheduled)
    assert again is not None and again.id == out["job"]
    assert again.func_name == OLD_PATHS[job]  # the skeleton keeps each job's own path
    assert again.kwargs == {**OLD_KWARGS, "reschedules": 1}
    lease = {"consolidation": K.consolidating, "extraction": K.extracting,
             "redaction": K.redacting}[job](GROUP)
    # consolidation and extraction keep the new job's id where their scheduler looks
    assert r.get(lease) == (None if job == "redaction" else out["job"].encode())


@pytest.mark.parametrize(("job", "end"), [("consolidation", "gave-up"),
                                          ("extraction", "gave-up"),
                                          ("redaction", "rescheduled")])
def test_the_give_up_policy_is_each_jobs_own(r: redis.Redis, job: str, end: str) -> None:
    """Consolidation and extraction give up after ``MAX_RESCHEDULES`` (their lease key
    dropped, so the next turn may schedule one); a redaction never does: from then on it
    is tried every ``SLOW_DELAY`` seconds."""
    from workers import maintenance, redaction

    limit = redaction.MAX_RESCHEDULES if job == "redaction" else maintenance.MAX_RESCHEDULES
    r.set(K.lease(GROUP), "a-drain", px=60_000)
    before = datetime.now(UTC)
    out = run_old(r, job, reschedules=limit)
    assert out["end"] == end
    q = Queue(BACKGROUND, connection=r, serializer="json")
    registry = ScheduledJobRegistry(queue=q)  # type: ignore[no-untyped-call]
    if end == "gave-up":
        assert registry.count == 0
        assert not r.exists(K.consolidating(GROUP), K.extracting(GROUP))
        return
    [jid] = registry.get_job_ids()
    again = q.fetch_job(jid)
    assert again is not None and again.kwargs["reschedules"] == limit + 1
    # the slow delay, not the usual one (seconds apart by two orders of magnitude)
    assert registry.get_scheduled_time(again) >= before + timedelta(
        seconds=redaction.SLOW_DELAY - 1)

"""Jobs queued before an upgrade still run after it (issue 23, rooms by concern).

RQ stores a job by its function's import path (``gateway/queue/jobs.py``,
``gateway/queue/transcribe.py``: all ``workers.*``) with JSON arguments (nothing
pickled), in the queue lists, the job hashes and the scheduled registry. Moving modules
must leave every stored path importable. ``fixtures/rq_jobs_before_rooms.json`` is what
Redis held after the tree *before* the move queued a drain job, scheduled a consolidation
an hour ahead and queued a transcription (every key, base64 values): restored here, each
job resolves, and the drain and the consolidation run to the end on a real worker.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

from tests.pipeline.conftest import ROOT, Valkey, write_config

FIXTURE = Path(__file__).with_name("fixtures") / "rq_jobs_before_rooms.json"


def restore(r: redis.Redis, path: Path) -> None:
    """Write the dumped keys back, as they were."""
    def raw(s: str) -> bytes:
        return base64.b64decode(s)

    for key, (kind, value) in json.loads(path.read_text(encoding="utf-8")).items():
        k = raw(key)
        if kind == "hash":
            r.hset(k, mapping={raw(f): raw(v) for f, v in value.items()})
        elif kind == "zset":
            r.zadd(k, {raw(m): score for m, score in value})
        elif kind == "list":
            r.rpush(k, *map(raw, value))
        elif kind == "set":
            r.sadd(k, *map(raw, value))
        else:
            r.set(k, raw(value))


def test_jobs_stored_before_the_move_resolve_and_run(tmp_path: Path, valkey: Valkey) -> None:
    r = redis.Redis.from_url(valkey.url)
    restore(r, FIXTURE)
    ids = [k.decode().removeprefix("rq:job:") for k in r.keys("rq:job:*")]
    jobs = {i: Job.fetch(i, connection=r, serializer=JSONSerializer) for i in ids}
    assert len(jobs) == 3
    # what a worker does first: import the function by its stored path
    assert sorted(j.func_name for j in jobs.values()) == [
        "workers.drain.drain_group", "workers.maintenance.consolidate_group",
        "workers.transcribe.transcribe_job"]
    assert all(callable(j.func) for j in jobs.values())

    # the scheduled consolidation, due now: what RQ's scheduler does when it is due
    background = Queue("pnc-drain.background", connection=r, serializer=JSONSerializer)
    registry = ScheduledJobRegistry(queue=background)
    assert registry.get_job_ids() == ["consolidate-before-rooms"]
    registry.remove(jobs["consolidate-before-rooms"])
    background.enqueue_job(jobs["consolidate-before-rooms"])

    config = write_config(tmp_path / "pynanoclaw.toml", valkey.url)
    done = subprocess.run(
        [sys.executable, "-m", "workers", "--config", str(config), "--redis-url", valkey.url,
         "--worker-class", "simple", "--burst", "--no-scheduler", "--log-level", "WARNING"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for job_id in ("drain-before-rooms", "consolidate-before-rooms"):
        job = Job.fetch(job_id, connection=r, serializer=JSONSerializer)
        assert job.get_status() == JobStatus.FINISHED, (job_id, job.latest_result())
    r.close()

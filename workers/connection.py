"""The Redis connection a job talks to."""

from __future__ import annotations

import os

import redis
from rq import get_current_job

#: the URL ``python -m workers`` exports for its jobs (and tests set by hand)
REDIS_URL_ENV = "PYNANOCLAW_REDIS_URL"


def job_connection(redis_url: str | None = None) -> redis.Redis:
    """The running RQ job's connection; outside a worker, ``redis_url`` or
    ``$PYNANOCLAW_REDIS_URL`` (a job function called directly, as tests do)."""
    job = get_current_job()
    if job is not None:
        return job.connection
    url = redis_url or os.environ.get(REDIS_URL_ENV)
    if not url:
        raise RuntimeError(f"no Redis: run inside an RQ worker or set {REDIS_URL_ENV}")
    return redis.Redis.from_url(url)

"""RQ worker classes with fewer Redis round trips per job.

RQ's ``heartbeat()`` without a pipeline sends HSET + EXPIRE + EXPIRE as three separate
round trips, and the work loop sends a default heartbeat about four times per job (after
the job, with the suspension check, before and after waiting for the next job). On a
local Redis each round trip is a context switch to the server and back, which on a small
machine is a visible part of a fast turn. These classes send a heartbeat's commands in
one pipeline, and skip a stand-alone default heartbeat when the previous default one is
less than ``HEARTBEAT_MIN_INTERVAL`` old: it would only move the worker key's expiry
(minutes away) by less than that. Heartbeats with a job-specific TTL always go out.
"""

from __future__ import annotations

import time
from typing import Any

from redis.client import Pipeline
from rq import SimpleWorker, Worker

#: seconds within which a repeated default heartbeat is skipped
HEARTBEAT_MIN_INTERVAL = 1.0


class _LeanHeartbeat:
    """Mixin: ``heartbeat()`` in one round trip, and not twice within a second."""

    connection: Any
    _last_default_heartbeat = 0.0

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        now = time.monotonic()
        if timeout is not None:
            # a job-specific TTL replaces the default one: the next default must go out
            self._last_default_heartbeat = 0.0
        elif pipeline is None and now - self._last_default_heartbeat < HEARTBEAT_MIN_INTERVAL:
            return
        else:
            self._last_default_heartbeat = now
        if pipeline is not None:
            super().heartbeat(timeout, pipeline=pipeline)  # type: ignore[misc]
            return
        with self.connection.pipeline() as pipe:
            super().heartbeat(timeout, pipeline=pipe)  # type: ignore[misc]
            pipe.execute()


class PipelinedSimpleWorker(_LeanHeartbeat, SimpleWorker):
    """``SimpleWorker`` (jobs run in the worker process) with the lean heartbeat."""


class PipelinedWorker(_LeanHeartbeat, Worker):
    """The forking ``Worker`` with the lean heartbeat."""

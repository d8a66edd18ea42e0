"""RQ worker classes with fewer Redis round trips per job.

RQ's ``heartbeat()`` without a pipeline sends HSET + EXPIRE + EXPIRE as three separate
round trips, and its work loop sends a heartbeat about four times per job (after the
job, with the suspension check, before and after waiting for the next job) and writes
the "idle" state twice. On a local Redis each round trip is a context switch to the
server and back, which on a small machine is a visible part of a fast turn. These
classes send a heartbeat's commands in one pipeline, skip a stand-alone heartbeat less
than ``HEARTBEAT_MIN_INTERVAL`` after the previous one, and skip writing a state the
worker already wrote.

Why skipping is safe: a heartbeat only moves the worker key's expiry (minutes away)
and its ``last_heartbeat`` field; every pass of RQ's loop still sends a default
heartbeat inside the suspension check's pipeline (never skipped) before it waits for
the next job; heartbeats with a job-specific TTL and any pipelined one always go out.
The worker's state is only ever written through ``set_state`` by this process.
"""

from __future__ import annotations

import time
from typing import Any

from redis.client import Pipeline
from rq import SimpleWorker, Worker

#: seconds within which a repeated stand-alone heartbeat is skipped
HEARTBEAT_MIN_INTERVAL = 1.0


class _LeanBookkeeping:
    """Mixin: ``heartbeat()`` in one round trip and not twice within a second;
    ``set_state()`` not repeated."""

    connection: Any
    _state: Any
    _last_heartbeat_at = -1e9

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        now = time.monotonic()
        if pipeline is not None:
            self._last_heartbeat_at = now
            super().heartbeat(timeout, pipeline=pipeline)  # type: ignore[misc]
            return
        if timeout is None and now - self._last_heartbeat_at < HEARTBEAT_MIN_INTERVAL:
            return
        self._last_heartbeat_at = now
        with self.connection.pipeline() as pipe:
            super().heartbeat(timeout, pipeline=pipe)  # type: ignore[misc]
            pipe.execute()

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> None:
        if pipeline is None and state == self._state:
            return
        super().set_state(state, pipeline=pipeline)  # type: ignore[misc]


class PipelinedSimpleWorker(_LeanBookkeeping, SimpleWorker):
    """``SimpleWorker`` (jobs run in the worker process) with lean bookkeeping."""


class PipelinedWorker(_LeanBookkeeping, Worker):
    """The forking ``Worker`` with lean bookkeeping."""

"""Issue 20, item 1: RQ's scheduler dies with the worker that forked it.

``kill -9`` of the worker hosting the scheduler used to leave the scheduler child alive
(parent 1) holding the dead worker's Redis sockets, among them the one blocked in the
queue pop: the server still counted that client as waiting and handed it the next job,
which nobody ran until the sweeper re-enqueued it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

import pytest

from tests.pipeline.conftest import Stack
from tests.pipeline.test_worker_env import _children as children


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_scheduler_dies_with_its_worker_and_no_job_is_swallowed(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.intake._inbox")
    stack.start_workers(1)
    await stack.start_gateway()
    ex = await stack.ask("alice", "alice", "hello", message_id="o-1")
    assert ex.reply == "ack o-1"
    await stack.settled("local:alice")  # the worker is idle, blocked in its queue pop
    worker = stack.workers[0]
    # the worker forks RQ's scheduler as it starts working, before its first job
    schedulers = children(worker.pid)
    assert len(schedulers) == 1, schedulers

    os.kill(worker.pid, signal.SIGKILL)  # the worker only, as the OOM killer would
    worker.wait()
    stack.workers = []
    try:
        await stack.wait_for(lambda: not alive(schedulers[0]), timeout=10,
                             what="the orphaned scheduler to die")
    finally:
        with contextlib.suppress(ProcessLookupError):  # an orphan left by a failure
            os.killpg(worker.pid, signal.SIGKILL)

    stack.start_workers(1)
    ex = await stack.ask("alice", "alice", "still there?", message_id="o-2")
    assert ex.reply == "ack o-2"
    # answered by the new worker's first pop, not by the sweeper rescuing a job that a
    # dead connection took
    assert not [r for r in caplog.records if "re-enqueued" in r.getMessage()]
    # and the new worker schedules at once: the dead scheduler's RQ lock (61 s TTL, then
    # up to a 10-minute wait for a worker's maintenance) was released as it started
    new = stack.workers[0].pid
    await stack.wait_for(lambda: len(children(new)) == 1, timeout=20,
                         what="the new worker's scheduler")

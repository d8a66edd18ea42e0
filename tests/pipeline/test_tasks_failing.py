"""A task whose runs keep failing for good (a model that always fails, real workers, the
gateway's scheduler): paused after ``[tasks] pause_after`` failed runs, the chat told
once, no run fired after it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.config import load_config
from memory_store import GroupDirectory
from memory_store.tasks import TaskSpec, TaskStore, Where, validate
from tests.pipeline.conftest import Stack, Valkey
from tests.pipeline.test_failure_notice import failing_config

GROUP = "local:ops"
TASKS = """
[tasks]
min_interval = 1
tick = 0.2
rescan = 0.5
grace = 1
pause_after = 2
"""


@pytest.mark.slow  # about 17 s: two failed runs, each after a lease lapses
@pytest.mark.timeout(120)
async def test_a_failing_task_is_paused_and_the_chat_told_once(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey)
    failing_config(stack.config_path, valkey.url)
    with stack.config_path.open("a", encoding="utf-8") as fh:
        fh.write(TASKS)
    stack.config = load_config(stack.config_path)
    store = TaskStore(GroupDirectory(stack.config.data_dir, GROUP))
    where = Where(group=GROUP, channel="local", chat_id="ops", is_group=True,
                  creator="local:ada", creator_role="member")
    store.create(validate(TaskSpec(name="check", text="check the build", every="2s"), where,
                          default_zone="UTC", min_interval=1, now=datetime.now(UTC)),
                 actor="test", cap=5)
    try:
        stack.start_workers(1)
        await stack.start_gateway()

        def state() -> str:
            task = store.get("check")
            return task.state if task else "gone"

        await stack.wait_for(lambda: state() == "paused", 90, "the task to pause")
        await stack.settled(GROUP)
        # the scheduler drops a paused task's time at its next due run
        await stack.wait_for(lambda: stack.r.zscore("pnc:tasks:due", f"{GROUP}\x1fcheck")
                             is None, 30, "the paused task to lose its time")
        fired = [r for r in store.runs("check", 100) if r["outcome"] == "fired"]
        await stack.settled(GROUP)
        outcomes = [r["outcome"] for r in store.runs("check", 100)]
        assert outcomes.count("failed") >= 2 and "ok" not in outcomes
        assert outcomes.count("paused") == 1
        told = [e for e in stack.chat_events("ops") if e.get("type") == "chunk"
                and "paused the scheduled task" in e.get("text", "")]
        assert len(told) == 1 and "\"check\"" in told[0]["text"]
        task = store.get("check")
        assert task is not None and task.failures >= 2
        assert [r for r in store.runs("check", 100) if r["outcome"] == "fired"] == fired
    finally:
        await stack.close()

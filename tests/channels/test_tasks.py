"""An adapter's background receive task (``channels.tasks``): its death is logged, a
stop is not, and ``cancel_task`` returns only once the task has unwound."""

from __future__ import annotations

import asyncio
import logging

import pytest

from channels.tasks import cancel_task, start_task

log = logging.getLogger("tests.channels.tasks")


async def test_a_loop_that_dies_is_logged_with_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def dies() -> None:
        raise RuntimeError("refused")

    task = start_task(dies(), name="t", log=log, what="demo: receive loop")
    with pytest.raises(RuntimeError):
        await task
    await asyncio.sleep(0)  # done callbacks run on the next loop pass
    [record] = [r for r in caplog.records if r.name == log.name]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == "demo: receive loop died: refused"


async def test_a_stopped_loop_is_not_logged_and_has_unwound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unwound = asyncio.Event()

    async def runs() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            unwound.set()

    task = start_task(runs(), name="t", log=log, what="demo: receive loop")
    await asyncio.sleep(0)  # let it start waiting
    await cancel_task(task)
    assert task.cancelled() and unwound.is_set()  # unwound before cancel_task returned
    await cancel_task(None)  # nothing started: nothing to stop
    await asyncio.sleep(0)
    assert not [r for r in caplog.records if r.name == log.name]

"""The background task an adapter receives in (a poller, an event stream, a sync loop).

Such a loop ends only by ``stop()`` or a refused credential, so ``start_task`` logs an
error when it ends any other way (nothing else awaits it until ``stop``), and
``cancel_task`` is the matching stop: cancel, then wait for it to unwind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["cancel_task", "start_task"]


def start_task(coro: Coroutine[Any, Any, None], *, name: str, log: logging.Logger,
               what: str) -> asyncio.Task[None]:
    """Run ``coro`` in the background; its death is logged as ``what`` died."""

    def report_end(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("%s died: %s", what, error, exc_info=error)

    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(report_end)
    return task


async def cancel_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to stop) and wait until it has unwound."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

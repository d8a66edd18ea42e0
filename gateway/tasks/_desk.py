"""Listing and changing a chat's tasks from outside a turn: the ``/tasks`` command and
``pynanoclaw tasks``.

Who may do what (the README's table): anyone the chat's policy lets in may list and
show its tasks and read their run logs; pausing, resuming and cancelling a task takes
its creator, a chat admin, the DM's owner or the operator (the CLI is the operator).
Changes are written to the task's file (audited, with the actor); a pause or a cancel
holds from the next due time on (the scheduler reads the file before firing), a resume
is picked up by the scheduler's next rescan (``[tasks] rescan``), or at once when the
desk has Redis (the CLI). Runs missed while paused are not caught up.
"""

from __future__ import annotations

from datetime import UTC, datetime

import redis

from gateway.config import Settings
from gateway.intake._groupfiles import GroupFiles
from gateway.queue import Keys
from gateway.queue.tasks import TaskTimes
from memory_store.tasks import Task, TaskStore, next_run, task_id

ACTIONS = ("list", "show", "pause", "resume", "cancel", "log")


class TaskDesk:
    def __init__(self, config: Settings, sync: redis.Redis | None = None) -> None:
        self._cfg = config
        self._files = GroupFiles.of(config)
        self._times = TaskTimes(sync, Keys()) if sync is not None else None

    def list(self, group: str) -> str:
        tasks = self._files.tasks(group).all()
        if not tasks:
            return "No scheduled tasks in this chat."
        return "Scheduled tasks:\n" + "\n".join(f"- {t.describe()}" for t in tasks)

    def _find(self, group: str, name: str) -> tuple[TaskStore, Task] | str:
        if not name.strip():
            return "Say which task, by its name (/tasks lists them)."
        try:
            tid = task_id(name)
        except ValueError as err:
            return str(err)
        store = self._files.tasks(group)
        task = store.get(tid)
        if task is None:
            return f"No task named {tid!r} in this chat (/tasks lists them)."
        return store, task

    def show(self, group: str, name: str) -> str:
        found = self._find(group, name)
        if isinstance(found, str):
            return found
        _, task = found
        when = "" if self._times is None else self._when(task)
        return task.describe() + when

    def _when(self, task: Task) -> str:
        assert self._times is not None
        at = self._times.next_at(task.group, task.id)
        if at is None:
            return "; no run scheduled"
        return f"; next run {datetime.fromtimestamp(at, task.zone).isoformat()}"

    def log(self, group: str, name: str, last: int = 20) -> str:
        found = self._find(group, name)
        if isinstance(found, str):
            return found
        store, task = found
        runs = store.runs(task.id, last)
        if not runs:
            return f"{task.name} has not run yet."
        lines = [" ".join(str(r.get(k, "")) for k in ("ts", "outcome", "due", "detail")).strip()
                 for r in runs]
        return f"Runs of {task.name} (newest last):\n" + "\n".join(lines)

    def change(self, group: str, action: str, name: str, *, by: str, may_any: bool) -> str:
        """Pause, resume or cancel; ``may_any``: the caller may change anyone's task (a
        chat admin, the DM's owner, the operator), else only their own."""
        found = self._find(group, name)
        if isinstance(found, str):
            return found
        store, task = found
        if not may_any and task.creator != by:
            return (f"Not allowed: {task.name} was created by {task.creator}; only they, a "
                    "chat admin or the operator may change it.")
        actor = f"user:{by}"
        if action == "cancel":
            store.delete(task.id, actor=actor, why=f"cancelled by {by}")
            if self._times is not None:
                self._times.unschedule(group, task.id)
            return f"Cancelled {task.name}."
        if action == "pause":
            if task.state == "paused":
                return f"{task.name} is already paused."
            store.update(task.id, actor=actor, state="paused", why=f"paused by {by}")
            store.log_run(task.id, "paused", detail=f"by {by}")
            if self._times is not None:
                self._times.unschedule(group, task.id)
            return f"Paused {task.name}."
        if task.state == "active":
            return f"{task.name} is not paused."
        if task.state == "done":
            return f"{task.name} has run and will not run again; schedule a new one."
        now = datetime.now(UTC)
        new = store.update(task.id, actor=actor, state="active", why="", failures=0)
        store.log_run(task.id, "resumed", due=now, detail=f"by {by}")
        if self._times is not None and new is not None:
            when = next_run(new, now)
            if when is not None:
                self._times.schedule(group, task.id, when.timestamp())
        return f"Resumed {task.name}."

"""Scheduled tasks as files: their model and input checks, when they run (time zones and
daylight saving), and the group's ``tasks/`` folder. The gateway's scheduler and the
workers' task tools both use this; neither keeps a definition anywhere else."""

from __future__ import annotations

from memory_store.tasks._model import (
    KINDS,
    Catchup,
    Task,
    TaskError,
    TaskSpec,
    Where,
    due_times,
    next_run,
    task_id,
    validate,
)
from memory_store.tasks._schedule import next_cron, place
from memory_store.tasks._store import TaskStore, groups_with_tasks

__all__ = [
    "KINDS",
    "Catchup",
    "Task",
    "TaskError",
    "TaskSpec",
    "TaskStore",
    "Where",
    "due_times",
    "groups_with_tasks",
    "next_cron",
    "next_run",
    "place",
    "task_id",
    "validate",
]

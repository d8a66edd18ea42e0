"""Scheduled tasks as files: their model and input checks, when they run (time zones and
daylight saving), and the group's ``tasks/`` folder. The gateway's scheduler and the
workers' task tools both use this; neither keeps a definition anywhere else."""

from __future__ import annotations

from memory_store.tasks._model import (
    CATCHUPS,
    KINDS,
    Catchup,
    Task,
    TaskError,
    TaskSpec,
    Where,
    due_times,
    next_run,
    parse_interval,
    task_id,
    validate,
)
from memory_store.tasks._schedule import next_cron, place
from memory_store.tasks._store import TASK_TRUST, TASKS_DIR, TaskStore, groups_with_tasks

__all__ = [
    "CATCHUPS",
    "KINDS",
    "TASKS_DIR",
    "TASK_TRUST",
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
    "parse_interval",
    "place",
    "task_id",
    "validate",
]

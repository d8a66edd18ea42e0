"""Scheduled tasks on the gateway's side: the scheduler loop that fires them into their
chats' mailboxes, and the desk the ``/tasks`` command and ``pynanoclaw tasks`` use."""

from __future__ import annotations

from gateway.tasks._command import tasks_command
from gateway.tasks._desk import TaskDesk
from gateway.tasks._fire import push_run
from gateway.tasks._scheduler import Scheduler

__all__ = ["Scheduler", "TaskDesk", "push_run", "tasks_command"]

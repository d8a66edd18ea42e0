"""A group's task files: ``tasks/<id>.md`` (the definition) and ``tasks/<id>.runs.jsonl``
(its run log), in the group directory like every memory file.

A definition is Markdown with a front matter (``id``, ``kind: task``, ``source``,
``created``, ``updated``, ``trust`` and the task's fields); its body is the task's text,
so a person can read and edit it. Written crash-safe (``atomic``) under the group's lock
and audited (``audit.jsonl``: ``task_create``, ``task_update``, ``task_delete``, with the
actor). The run log is append-only, one JSON line per run (fired, missed, ok, failed,
skipped, paused), written with O_APPEND like the audit log. ``tasks/`` is not a memory
directory: its files are not searched as memory.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from memory_store.files._atomic import atomic_write_text, read_regular
from memory_store.files._audit import AuditLog, append_json_line, json_line
from memory_store.files._fileformat import content_hash, split_front_matter
from memory_store.files._group import GroupDirectory
from memory_store.files._paths import groups_root
from memory_store.files._schema import SCHEMA_VERSION
from memory_store.tasks._model import Task, TaskError

log = logging.getLogger(__name__)

TASKS_DIR = "tasks"
#: what a task says is a member's words: it never speaks above member trust
TASK_TRUST = 0.5
RUNS_SUFFIX = ".runs.jsonl"


class TaskStore:
    """The tasks of one group directory."""

    def __init__(self, gd: GroupDirectory) -> None:
        self.gd = gd
        self.dir = gd.path / TASKS_DIR
        self._audit = AuditLog(gd.path)

    def _path(self, tid: str) -> Path:
        return self.dir / f"{tid}.md"

    def get(self, tid: str) -> Task | None:
        try:
            raw = read_regular(self._path(tid))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return self._parse(raw, self._path(tid))

    def _parse(self, raw: bytes, path: Path) -> Task | None:
        head, body = split_front_matter(raw.decode("utf-8", "replace"))
        if head is None or head.get("kind") != "task":
            log.warning("%s: not a task file (no front matter with kind: task); ignored", path)
            return None
        version = head.get("schema")
        if isinstance(version, int) and version > SCHEMA_VERSION:
            log.warning("%s has schema version %d; this version reads up to %d", path,
                        version, SCHEMA_VERSION)
        try:
            task = Task.from_dict({**head, "kind": head.get("schedule_kind"),
                                   "text": body.strip()})
        except (TypeError, ValueError, KeyError) as err:
            log.warning("%s: unreadable task (%s); ignored", path, err)
            return None
        if task.id != path.stem or task.group != self.gd.group:
            log.warning("%s: its id or group does not match its place; ignored", path)
            return None
        return task

    def all(self) -> list[Task]:
        """Every task of the group (done ones included), by name."""
        try:
            names = sorted(os.listdir(self.dir))
        except (FileNotFoundError, NotADirectoryError):
            return []
        tasks = (self.get(name[:-3]) for name in names
                 if name.endswith(".md") and not name.startswith("."))
        return [task for task in tasks if task is not None]

    def live(self) -> list[Task]:
        """Tasks that count against the cap: active and paused."""
        return [t for t in self.all() if t.state != "done"]

    def create(self, task: Task, *, actor: str, cap: int) -> Task:
        """Write a new task; ``TaskError`` when its name is taken or the group is full."""
        with self.gd.lock():
            old = self.get(task.id)
            if old is not None and old.state != "done":
                raise TaskError(f"this chat already has a task named {task.id!r}; cancel it "
                                "first or choose another name")
            live = len(self.live())
            if live >= cap:
                raise TaskError(f"this chat has {live} tasks, the most allowed here is {cap}; "
                                "cancel one first")
            self._write(task, actor=actor, op="task_create")
        return task

    def save(self, task: Task, *, actor: str) -> None:
        """Replace a task's definition (a pause, a resume, a failure count)."""
        with self.gd.lock():
            self._write(task, actor=actor, op="task_update")

    def update(self, tid: str, *, actor: str, **changes: Any) -> Task | None:
        """Read, change and write ``tid`` under the lock; None when it does not exist."""
        with self.gd.lock():
            task = self.get(tid)
            if task is None:
                return None
            new = task.with_(**changes)
            self._write(new, actor=actor, op="task_update")
            return new

    def delete(self, tid: str, *, actor: str, why: str) -> Task | None:
        """Remove a task's definition (its run log stays, as the record of what ran)."""
        with self.gd.lock():
            task = self.get(tid)
            path = self._path(tid)
            old = _hash(path)
            if old is None:
                return None
            path.unlink()
            self._audit.append(actor=actor, op="task_delete", memory_id=f"task:{tid}",
                               path=f"{TASKS_DIR}/{path.name}", old_hash=old, new_hash=None,
                               why=why)
        self.log_run(tid, "cancelled", detail=why)
        return task

    def _write(self, task: Task, *, actor: str, op: str) -> None:
        path = self._path(task.id)
        old = _hash(path)
        data = task.to_dict()
        text = data.pop("text")
        # ``kind`` is the memory file's kind ("task"); the task's own is ``schedule_kind``
        head = {"id": task.id, "kind": "task", "source": task.creator,
                "created": data.pop("created"), "updated": data.pop("updated"),
                "trust": TASK_TRUST, "schedule_kind": data.pop("kind"),
                "schema": SCHEMA_VERSION,
                **{k: v for k, v in data.items() if k != "id"}}
        body = "---\n" + yaml.safe_dump(head, sort_keys=False, allow_unicode=True) + \
            f"---\n{text}\n"
        atomic_write_text(path, body)
        self._audit.append(actor=actor, op=op, memory_id=f"task:{task.id}",
                           path=f"{TASKS_DIR}/{path.name}", old_hash=old,
                           new_hash=content_hash(body.encode()))

    def log_run(self, tid: str, outcome: str, *, due: datetime | None = None,
                detail: str = "", **extra: Any) -> None:
        """Append one line to the task's run log."""
        self.dir.mkdir(parents=True, exist_ok=True)
        entry: dict[str, Any] = {"ts": datetime.now(UTC).isoformat(timespec="seconds"),
                                 "outcome": outcome}
        if due is not None:
            entry["due"] = due.astimezone(UTC).isoformat(timespec="seconds")
        if detail:
            entry["detail"] = detail
        entry.update(extra)
        append_json_line(self.dir / f"{tid}{RUNS_SUFFIX}", entry)

    def last_fired(self, tid: str) -> datetime | None:
        """The due time of the task's newest fired run, or when it was resumed (runs
        missed while paused are not caught up), from its run log; None: never ran."""
        return next((datetime.fromisoformat(str(item["due"]))
                     for item in reversed(self.runs(tid, last=200))
                     if item.get("outcome") in ("fired", "resumed") and item.get("due")), None)

    def runs(self, tid: str, last: int = 20) -> list[dict[str, Any]]:
        """The newest ``last`` lines of the task's run log, oldest first."""
        try:
            lines = (self.dir / f"{tid}{RUNS_SUFFIX}").read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        return [item for line in lines[-last:] if (item := json_line(line)) is not None]


def _hash(path: Path) -> str | None:
    """The content hash of the file at ``path`` (for the audit log); None: no file."""
    try:
        return content_hash(read_regular(path))
    except FileNotFoundError:
        return None


def groups_with_tasks(data_dir: Path) -> Iterator[GroupDirectory]:
    """Every group directory that has a ``tasks/`` folder (from the files alone: what
    rebuilds the scheduler's sorted set after a Redis loss)."""
    root = groups_root(data_dir)
    for tasks in sorted(root.glob(f"*/*/{TASKS_DIR}")):
        if not tasks.is_dir() or tasks.is_symlink():
            continue
        for path in sorted(tasks.glob("*.md")):
            try:
                head, _ = split_front_matter(read_regular(path).decode("utf-8", "replace"))
            except (FileNotFoundError, OSError):
                continue
            group = head.get("group") if head else None
            if isinstance(group, str):
                try:
                    gd = GroupDirectory(data_dir, group)
                except ValueError:
                    continue
                if gd.path == tasks.parent.resolve():
                    yield gd
                    break

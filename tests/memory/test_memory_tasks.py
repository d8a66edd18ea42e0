"""Scheduled tasks as files: when they run (daylight saving both ways), catch-up
arithmetic, the checks on input, the cap, and the audited files."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from memory_store import GroupDirectory
from memory_store.files import AuditLog
from memory_store.tasks import Task, TaskError, TaskSpec, TaskStore, Where, due_times, validate

NY = ZoneInfo("America/New_York")
WHERE = Where(group="local:g1", channel="local", chat_id="g1", is_group=True,
              creator="local:alice", creator_role="member")
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _task(**spec: object) -> Task:
    fields: dict[str, object] = {"name": "t", "text": "do it", "timezone": "America/New_York"}
    fields.update(spec)
    return validate(TaskSpec(**fields), WHERE, default_zone="UTC",  # type: ignore[arg-type]
                    min_interval=60, now=NOW)


def _runs(task: Task, start: datetime, n: int) -> list[datetime]:
    out, when = [], start
    for _ in range(n):
        nxt = task.next_after(when)
        assert nxt is not None
        out.append(nxt)
        when = nxt
    return out


def test_spring_forward_nonexistent_time_fires_once_at_next_valid_minute() -> None:
    # 2026-03-08: New York clocks jump from 02:00 EST to 03:00 EDT; 02:30 does not exist
    daily = _task(cron="30 2 * * *")
    runs = _runs(daily, datetime(2026, 3, 6, 12, tzinfo=UTC), 3)
    local = [r.astimezone(NY).strftime("%m-%d %H:%M") for r in runs]
    assert local == ["03-07 02:30", "03-08 03:00", "03-09 02:30"]
    # every 15 minutes: 02:00, 02:15, 02:30, 02:45 all fall in the gap: one run at 03:00
    quarter = _task(cron="*/15 * * * *", name="q")
    runs = _runs(quarter, datetime(2026, 3, 8, 6, 40, tzinfo=UTC), 4)  # 01:40 EST
    local = [r.astimezone(NY).strftime("%H:%M %Z") for r in runs]
    assert local == ["01:45 EST", "03:00 EDT", "03:15 EDT", "03:30 EDT"]


def test_fall_back_repeated_time_fires_once() -> None:
    # 2026-11-01: New York clocks go from 02:00 EDT back to 01:00 EST; 01:30 occurs twice
    daily = _task(cron="30 1 * * *")
    runs = _runs(daily, datetime(2026, 10, 31, 12, tzinfo=UTC), 3)
    assert [r.astimezone(NY).strftime("%m-%d %H:%M %Z") for r in runs] == [
        "11-01 01:30 EDT", "11-02 01:30 EST", "11-03 01:30 EST"]
    hourly = _task(cron="30 * * * *", name="h")
    runs = _runs(hourly, datetime(2026, 11, 1, 4, 0, tzinfo=UTC), 3)  # 00:00 EDT
    assert [r.astimezone(NY).strftime("%H:%M %Z") for r in runs] == [
        "00:30 EDT", "01:30 EDT", "02:30 EST"]  # the second 01:30 (EST) is not a new time


def test_interval_ignores_daylight_saving() -> None:
    task = _task(every="1h")
    runs = _runs(task, datetime(2026, 3, 8, 6, 0, tzinfo=UTC), 3)
    assert [(b - a) for a, b in itertools.pairwise(runs)] == [timedelta(hours=1)] * 2


@pytest.mark.parametrize(("spec", "words"), [
    ({"cron": "61 * * * *"}, "not a valid cron expression"),
    ({"cron": "every monday"}, "not a valid cron expression"),
    ({"cron": "0 9 * * 1", "timezone": "Mars/Olympus"}, "does not exist"),
    ({"every": "30s"}, "shortest interval allowed here is 60"),
    ({"cron": "* * * * *", "every": "2h"}, "exactly one of"),
    ({"every": "soon"}, "is not a duration"),
    ({"at": "2020-01-01T09:00"}, "in the past"),
    ({"every": "1h", "catchup": "sometimes"}, "catch-up must be one of"),
])
def test_bad_input_gets_a_clear_error(spec: dict[str, str], words: str) -> None:
    with pytest.raises(TaskError, match=words):
        _task(**spec)


def test_cap_and_files_are_audited(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, "local:g1").ensure()
    store = TaskStore(gd)
    store.create(_task(name="one", every="1h"), actor="test", cap=2)
    store.create(_task(name="two", every="1h"), actor="test", cap=2)
    with pytest.raises(TaskError, match="the most allowed here is 2"):
        store.create(_task(name="three", every="1h"), actor="test", cap=2)
    with pytest.raises(TaskError, match="already has a task named 'one'"):
        store.create(_task(name="One", every="2h"), actor="test", cap=5)
    assert [t.id for t in store.all()] == ["one", "two"]
    again = store.get("one")
    assert again is not None and again.text == "do it" and again.kind == "interval"
    store.update("one", actor="test", state="paused", why="x")
    store.delete("two", actor="test", why="cancelled")
    ops = [json.loads(line)["op"] for line in AuditLog(gd.path).path.read_text().splitlines()]
    assert "\nschema: 2\n" in (gd.path / "tasks" / "one.md").read_text()  # versioned
    # the core templates' creation is audited too (memory_store/files/_coreedits.py)
    assert [op for op in ops if op.startswith("task_")] == [
        "task_create", "task_create", "task_update", "task_delete"]
    # a paused task still counts; a deleted one does not
    store.create(_task(name="three", every="1h"), actor="test", cap=2)


def test_due_times_counts_a_long_downtime_without_listing_it() -> None:
    task = _task(every="2m")
    first = NOW + timedelta(minutes=2)
    dues, total = due_times(task, first, first + timedelta(days=7), limit=3)
    assert total == 7 * 24 * 30 + 1 and len(dues) == 3
    assert dues[-1] == first + timedelta(days=7)


def test_a_hand_edited_task_is_read_and_a_broken_one_ignored(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, "local:g1").ensure()
    store = TaskStore(gd)
    store.create(_task(name="edit-me", cron="0 9 * * 1"), actor="test", cap=5)
    path = gd.path / "tasks" / "edit-me.md"
    text = path.read_text()
    path.write_text(text.replace("do it", "post the weekly plan"))
    task = store.get("edit-me")
    assert task is not None and task.text == "post the weekly plan"
    for bad in (("state: active", "state: sleeping"), ("America/New_York", "Mars/Base"),
                ("0 9 * * 1", "0 25 * * 1")):
        path.write_text(text.replace(*bad))
        assert store.get("edit-me") is None and store.all() == []

"""A scheduled task: what it says, when it runs, who made it; and the checks on input.

``TaskSpec`` is what a creator asks for (from the agent's tool, a chat command or the
CLI); ``validate`` turns it into a ``Task`` or raises ``TaskError`` with a message meant
for the person who asked (an invalid cron expression, a zone that does not exist, an
interval under the operator's minimum, a full group). ``Task.next_after`` is the one
function that says when a task runs next (``_schedule``).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memory_store.tasks._schedule import cron_gap, is_valid_cron, next_cron, next_interval, place

Kind = Literal["cron", "interval", "once"]
Catchup = Literal["skip", "once", "all"]
State = Literal["active", "paused", "done"]
KINDS: tuple[Kind, ...] = ("cron", "interval", "once")
CATCHUPS: tuple[Catchup, ...] = ("skip", "once", "all")
STATES: tuple[State, ...] = ("active", "paused", "done")
#: a task's words are a message to the bot, not a document
TEXT_MAX_CHARS = 1000
NAME_MAX_CHARS = 40
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*")


class TaskError(ValueError):
    """Bad input for a task; the message says what and how to fix it."""


def task_id(name: str) -> str:
    """The id (and file name) of a task called ``name``: lowercase words joined by "-"."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.casefold()).strip("-")[:NAME_MAX_CHARS].strip("-")
    if not slug or not _NAME.fullmatch(slug):
        raise TaskError("give the task a short name of letters or digits, e.g. "
                        "\"standup-reminder\"")
    return slug


def parse_interval(value: str | float) -> float:
    """Seconds from ``90``, ``"90"``, ``"15m"``, ``"2h"``, ``"1d"``."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.fullmatch(value)
        if m is None:
            raise TaskError(f"interval {value!r} is not a duration: give seconds or a number "
                            "with s, m, h or d, e.g. \"15m\"")
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds <= 0:
        raise TaskError("the interval must be more than zero")
    return seconds


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TaskError(f"time zone {name!r} does not exist: give an IANA name such as "
                        "\"Europe/Paris\" or \"America/New_York\"") from None


@dataclass(frozen=True)
class TaskSpec:
    """A request to create a task. Exactly one of ``cron``, ``every``, ``at``."""

    name: str
    text: str
    cron: str | None = None
    every: str | float | None = None
    at: str | None = None  # ISO date-time, on the wall clock of ``timezone``
    timezone: str | None = None
    catchup: str = "once"


@dataclass(frozen=True)
class Where:
    """The chat a task speaks in, and who made it (computed from structure); each field
    is a ``Task``'s too (``validate`` passes them on whole)."""

    group: str
    channel: str
    chat_id: str
    is_group: bool
    creator: str  # ``channel:sender_id``
    creator_role: str
    account: str = "default"
    thread_id: str | None = None


@dataclass(frozen=True)
class Task:
    id: str
    name: str
    text: str
    kind: Kind
    schedule: str  # the cron expression, the interval in seconds, or the ISO wall time
    timezone: str
    catchup: Catchup
    group: str
    channel: str
    chat_id: str
    is_group: bool
    creator: str
    creator_role: str
    created: datetime
    account: str = "default"
    thread_id: str | None = None
    state: State = "active"
    why: str = ""  # why it is paused or done
    failures: int = 0  # consecutive failed runs
    updated: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.timezone)

    def next_after(self, after: datetime) -> datetime | None:
        """When the task runs next, strictly after ``after`` (None: never again)."""
        if self.kind == "interval":
            return next_interval(float(self.schedule), self.created, after)
        if self.kind == "cron":
            return next_cron(self.schedule, self.zone, after)
        when = place(datetime.fromisoformat(self.schedule), self.zone)
        return when if when > after else None

    def describe(self) -> str:
        how = {"cron": f"cron \"{self.schedule}\"", "interval":
               f"every {float(self.schedule):g} s", "once": f"once at {self.schedule}"}
        state = self.state if not self.why else f"{self.state} ({self.why})"
        return (f"{self.name}: {how[self.kind]} {self.timezone}, catch-up {self.catchup}, "
                f"{state}, by {self.creator}: {self.text}")

    def with_(self, **changes: Any) -> Task:
        return replace(self, updated=datetime.now(UTC), **changes)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["created"] = self.created.isoformat()
        out["updated"] = self.updated.isoformat()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("created", "updated"):
            v = values.get(key)
            values[key] = v if isinstance(v, datetime) else datetime.fromisoformat(str(v))
            if values[key].tzinfo is None:
                values[key] = values[key].replace(tzinfo=UTC)
        values["schedule"] = str(values["schedule"])
        # a hand-edited file: a value outside the choices is refused, not half-used
        for key, allowed in (("kind", KINDS), ("catchup", CATCHUPS), ("state", STATES)):
            if key in values and values[key] not in allowed:
                raise ValueError(f"{key} must be one of {', '.join(allowed)}")
        if values.get("kind") == "cron" and not is_valid_cron(values["schedule"]):
            raise ValueError(f"invalid cron expression {values['schedule']!r}")
        zone(str(values.get("timezone", "")))
        return cls(**values)


def validate(spec: TaskSpec, where: Where, *, default_zone: str, min_interval: float,
             now: datetime) -> Task:
    """The ``Task`` ``spec`` asks for, or ``TaskError`` naming what is wrong."""
    tid = task_id(spec.name)
    text = " ".join(spec.text.split())
    if not text:
        raise TaskError("say what the task should ask, e.g. \"post the build status\"")
    if len(text) > TEXT_MAX_CHARS:
        raise TaskError(f"the task's text is {len(text)} characters; at most "
                        f"{TEXT_MAX_CHARS}")
    given = [k for k, v in (("cron", spec.cron), ("every", spec.every), ("at", spec.at))
             if v not in (None, "")]
    if len(given) != 1:
        raise TaskError("give exactly one of: a cron expression (\"0 9 * * 1\"), an "
                        "interval (\"15m\") or a time to run once (\"2026-05-01T09:00\")")
    if spec.catchup not in CATCHUPS:
        raise TaskError(f"catch-up must be one of {', '.join(CATCHUPS)}, not "
                        f"{spec.catchup!r}")
    tz_name = spec.timezone or default_zone
    tz = zone(tz_name)
    kind: Kind
    if spec.cron not in (None, ""):
        expr = " ".join(str(spec.cron).split())
        if not is_valid_cron(expr):
            raise TaskError(f"{expr!r} is not a valid cron expression: five fields, minute "
                            "hour day month weekday, e.g. \"0 9 * * 1\" for Mondays at 9")
        gap = cron_gap(expr, tz, now)
        if gap == float("inf") and next_cron(expr, tz, now) is None:
            raise TaskError(f"cron expression {expr!r} never runs")
        kind, schedule, interval = "cron", expr, gap
    elif spec.every not in (None, ""):
        assert spec.every is not None
        seconds = parse_interval(spec.every)
        kind, schedule, interval = "interval", repr(seconds), seconds
    else:
        try:
            wall = datetime.fromisoformat(str(spec.at))
        except ValueError:
            raise TaskError(f"{spec.at!r} is not a date and time: write it as "
                            "\"2026-05-01T09:00\"") from None
        if wall.tzinfo is not None:
            wall = wall.astimezone(tz).replace(tzinfo=None)
        if place(wall, tz) <= now:
            raise TaskError(f"{wall.isoformat()} in {tz_name} is in the past")
        kind, schedule, interval = "once", wall.isoformat(), float("inf")
    if interval < min_interval:
        raise TaskError(f"that runs every {interval:g} s; the shortest interval allowed "
                        f"here is {min_interval:g} s")
    return Task(id=tid, name=spec.name.strip()[:NAME_MAX_CHARS] or tid, text=text,
                kind=kind, schedule=schedule, timezone=tz_name,
                catchup=spec.catchup,  # type: ignore[arg-type]  # checked above
                created=now.replace(microsecond=0) if kind != "interval" else now,
                **asdict(where))


def due_times(task: Task, first: datetime, now: datetime, limit: int) -> tuple[
        list[datetime], int]:
    """The run times from ``first`` (a due time) up to ``now``: the last ``limit`` of
    them, and how many there were in all (an every-2-seconds task down for a week has
    300,000; they are counted, not listed)."""
    if task.kind == "interval":
        every = float(task.schedule)
        total = int((now - first).total_seconds() // every) + 1 if now >= first else 0
        keep = min(total, limit)
        last = first + timedelta(seconds=(total - 1) * every)
        return [last - timedelta(seconds=i * every) for i in reversed(range(keep))], total
    times: deque[datetime] = deque(maxlen=limit)
    when: datetime | None = first
    total = 0
    jumped = False
    while when is not None and when <= now:
        total += 1
        times.append(when)
        if total >= 10_000 and not jumped:  # a cron every minute for weeks: skip ahead
            jumped = True  # (the total is then a lower bound)
            when = task.next_after(max(when, now - timedelta(days=1)))
            continue
        when = task.next_after(when)
    return list(times), total


def next_run(task: Task, last_due: datetime | None) -> datetime | None:
    """When ``task`` runs next: after its last fired run, else after its creation."""
    return task.next_after(last_due or task.created)

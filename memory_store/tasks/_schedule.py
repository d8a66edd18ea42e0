"""When a task runs: the next fire time of a cron expression, an interval or a one-off
time, in the task's own time zone, daylight saving included.

Cron expressions are read on the wall clock of the zone (croniter over naive local
times), then placed on the timeline:

- a wall time that does not exist (the hour skipped when clocks go forward) fires once,
  at the first valid minute after it (every skipped time lands there, so several cron
  times inside the gap still fire once);
- a wall time that occurs twice (the hour repeated when clocks go back) fires once, at
  its first occurrence (``fold=0``); the second occurrence is never a new time.

Intervals are counted on the timeline (UTC) from the task's anchor; daylight saving does
not stretch them. Every function takes and returns aware datetimes.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

#: longest daylight-saving gap walked minute by minute (the largest in use is one hour;
#: Lord Howe's is 30 minutes, some historic ones two hours)
_GAP_MINUTES = 180
#: cron candidates tried before giving up (an expression that never matches, 30 Feb)
_MAX_CANDIDATES = 2000


def _exists(naive: datetime, zone: ZoneInfo) -> bool:
    back = naive.replace(tzinfo=zone).astimezone(UTC).astimezone(zone)
    return back.replace(tzinfo=None) == naive


def place(naive: datetime, zone: ZoneInfo) -> datetime:
    """The instant a wall time of ``zone`` names: its first occurrence when it occurs
    twice, the first valid minute after it when it does not exist."""
    probe = naive
    for _ in range(_GAP_MINUTES + 1):
        if _exists(probe, zone):
            return probe.replace(tzinfo=zone, fold=0).astimezone(UTC)
        probe = (probe + timedelta(minutes=1)).replace(second=0, microsecond=0)
    raise ValueError(f"no valid time in {zone.key} near {naive.isoformat()}")


def next_cron(expr: str, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The first run of ``expr`` in ``zone`` strictly after ``after`` (UTC)."""
    # Start a little before ``after``'s wall time: inside a repeated hour its wall time
    # runs backwards, and a candidate placed on its first occurrence may still lie after
    # ``after`` on the timeline only when read from the earlier wall time.
    start = after.astimezone(zone).replace(tzinfo=None) - timedelta(hours=2)
    it = croniter(expr, start)
    for _ in range(_MAX_CANDIDATES):
        wall: datetime = it.get_next(datetime)
        when = place(wall, zone)
        if when > after:
            return when
    return None


def next_interval(every: float, anchor: datetime, after: datetime) -> datetime:
    """The first ``anchor + k * every`` (k >= 0) strictly after ``after``."""
    if after < anchor:
        return anchor
    k = int((after - anchor).total_seconds() // every) + 1
    when = anchor + timedelta(seconds=k * every)
    while when <= after:  # float rounding
        k += 1
        when = anchor + timedelta(seconds=k * every)
    return when


def cron_gap(expr: str, zone: ZoneInfo, start: datetime) -> float:
    """The shortest gap between the next few runs of ``expr``, seconds (its interval as
    far as a minimum interval is concerned)."""
    times: list[datetime] = []
    when: datetime | None = start
    for _ in range(6):
        when = next_cron(expr, zone, when) if when is not None else None
        if when is None:
            break
        times.append(when)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    return min(gaps) if gaps else float("inf")


def is_valid_cron(expr: str) -> bool:
    return bool(expr.strip()) and croniter.is_valid(expr) and len(expr.split()) == 5

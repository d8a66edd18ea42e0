"""What model calls cost, for people: ``/usage`` in chat and ``pynanoclaw usage``.

Reads what the workers' meter wrote (``gateway.queue.Budget``: the counters, the
per-day call logs) and changes caps at run time. Changing a cap releases the groups a
cap parked (their kept messages then go through, or park again if a cap still holds).
Money is shown in USD; counters keep micro-USD.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from gateway.config import Settings
from gateway.queue import Budget, Spent, counters, period_ids
from gateway.queue.budget import NO_CAP


def usd(micro: int) -> str:
    return f"${micro / 1_000_000:.4f}"


def parse_usd(text: str) -> int | None:
    """``none`` (lifted) or a USD amount, as micro-USD. Raises ``ValueError``."""
    if text.lower() == NO_CAP:
        return None
    value = float(text.lstrip("$"))
    if not value >= 0:
        raise ValueError(f"not an amount: {text!r}")
    return round(value * 1_000_000)


def render_spent(rows: Iterable[Spent]) -> list[str]:
    """One line per counter: spent, cap, what remains."""
    out = []
    for s in rows:
        if s.cap is None:
            cap = "no cap" + (" (lifted)" if s.overridden else "")
        else:
            left = max(s.cap - s.spent - s.reserved, 0)
            cap = f"cap {usd(s.cap)}{' (set at run time)' if s.overridden else ''}, " \
                  f"{usd(left)} left"
        out.append(f"{s.scope} this {s.period}: {usd(s.spent)} spent; {cap}")
    return out


@dataclass(frozen=True)
class Row:
    """One day's calls of one kind, group and person."""

    day: str
    kind: str
    group: str
    person: str
    cost: int = 0
    input: int = 0
    output: int = 0
    cached: int = 0
    requests: int = 0
    estimated: int = 0


def usage_rows(budget: Budget, settings: Settings, days: int, now: datetime | None = None
               ) -> list[Row]:
    """The last ``days`` days' calls (the operator's days), newest first."""
    now = (now or datetime.now(settings.usage.zone)).astimezone(settings.usage.zone)
    rows = []
    for back in range(days):
        day = period_ids(now - timedelta(days=back))["day"]
        for (kind, group, person), m in sorted(budget.log(day).items()):
            rows.append(Row(day[1:], kind, group, person, m.get("cost", 0), m.get("in", 0),
                            m.get("out", 0), m.get("cached", 0), m.get("req", 0),
                            m.get("est", 0)))
    return rows


def usage_report(budget: Budget, settings: Settings, days: int) -> dict[str, Any]:
    """Everything ``pynanoclaw usage --json`` prints."""
    now = datetime.now(settings.usage.zone)
    rows = usage_rows(budget, settings, days, now)
    totals = [budget.spent(c) for c in counters(now, None, None, settings.usage.micro_caps)]
    return {
        "timezone": settings.usage.timezone,
        "calls": [asdict(r) for r in rows],
        "global": [asdict(s) for s in totals],
        "parked": budget.parked(),
        "soft_crossed": budget.soft_crossed(),
    }


def render_report(report: dict[str, Any]) -> list[str]:
    lines = render_spent(Spent(**s) for s in report["global"])
    if report["parked"]:
        lines.append("stopped at a cap (messages kept): " + ", ".join(report["parked"]))
    for field in report["soft_crossed"]:
        lines.append(f"soft budget crossed: {field}")
    lines.append("")
    lines.append("day         kind        group                      person              "
                 "   cost   requests   in / out / cached tokens")
    for r in report["calls"]:
        est = f" ({r['estimated']} estimated)" if r["estimated"] else ""
        lines.append(f"{r['day']}  {r['kind']:<10}  {r['group']:<25}  {r['person']:<18}  "
                     f"{usd(r['cost']):>10}  {r['requests']:>5}{est}   "
                     f"{r['input']} / {r['output']} / {r['cached']}")
    if not report["calls"]:
        lines.append("(no model calls metered in this window)")
    return lines


def usage_summary(budget: Budget, settings: Settings, group: str, person: str) -> str:
    """``/usage``: the chat's and the person's spend and caps (blocking: a thread's)."""
    now = datetime.now(settings.usage.zone)
    rows = [budget.spent(c) for c in counters(now, group, person, settings.usage.micro_caps)]
    lines = render_spent(r for r in rows if r.scope != "global")
    return "Model usage (" + settings.usage.timezone + "):\n" + "\n".join(lines)

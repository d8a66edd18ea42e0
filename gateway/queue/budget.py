"""Spending counters and caps in Redis: reserve before a model request, settle after.

Money is integer micro-USD (a price in USD per million tokens times a token count is
micro-USD), so counters are exact HINCRBYs. A *counter* is one scope (``global``,
``group:{g}``, ``person:{p}``) in one period (``d2026-12-03``, ``m2026-12``: the
operator's day and month); a request is checked against every counter that applies in
one script (``budget_reserve.lua``), so concurrent workers can overshoot a cap by at most
the error of the estimate each of them has in flight, never by a whole read-then-write
race. The states of one counter::

    reserve (spent + reserved + estimate <= cap) ──▶ reserved += estimate
        │ the request runs (or fails)
        ▼
    settle: reserved -= estimate, spent += real cost (usage:{day} logs the call)

Only a counter with a cap (the config's or a run-time one) is checked and reserved
under; one without a cap only gets its ``spent`` at the settle (``Reservation.held``
says which were reserved under, so a cap set between the two settles right). A worker
killed between the two leaves its estimate reserved until the counter expires with its
period (a cap then bites a little early, never late).

``Budget`` takes no policy: which caps apply, prices and estimates are the caller's
(``workers.metering`` for model calls, the CLI and ``/usage`` for changing caps).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from gateway.queue.events import OutboxEvent, as_str
from gateway.queue.keys import Keys
from gateway.queue.scripts import Scripts

#: a counter outlives its period by this much (so a report of last month still reads it)
COUNTER_TTL = {"day": 3 * 24 * 3600, "month": 62 * 24 * 3600}
#: days of per-call usage logs kept for ``pynanoclaw usage``
LOG_TTL = 100 * 24 * 3600
#: the run-time cap value that lifts a cap
NO_CAP = "none"


def period_ids(now: datetime) -> dict[str, str]:
    """The day's and the month's counter ids of ``now`` (an aware time in the operator's
    zone)."""
    return {"day": now.strftime("d%Y-%m-%d"), "month": now.strftime("m%Y-%m")}


@dataclass(frozen=True)
class Counter:
    """One scope in one period, with its caps (micro-USD, ``None``: none)."""

    scope: str
    period: str  # "day" | "month"
    period_id: str
    hard: int | None = None
    soft: int | None = None

    @property
    def cap_field(self) -> str:
        """Its field in ``budget:caps`` (a run-time cap holds for every period)."""
        return f"{self.scope}:{self.period}"

    @property
    def soft_field(self) -> str:
        return f"{self.scope}:{self.period_id}"


def counters(now: datetime, group: str | None, person: str | None,
             caps: Callable[[str, str], tuple[int | None, int | None]]) -> list[Counter]:
    """The counters a request of ``group`` (and ``person``) is checked against, at
    ``now`` (in the operator's zone); ``caps(scope kind, period)`` gives (hard, soft)."""
    ids = period_ids(now)
    scopes = [("global", "global")]
    if group:
        scopes.append(("group", f"group:{group}"))
    if person:
        scopes.append(("person", f"person:{person}"))
    out = []
    for kind, scope in scopes:
        for period in ("day", "month"):
            hard, soft = caps(kind, period)
            out.append(Counter(scope, period, ids[period], hard=hard, soft=soft))
    return out


@dataclass(frozen=True)
class Reservation:
    """What ``Budget.reserve`` did for one request: ``refused`` by that counter's cap
    (nothing reserved), else its estimate is held under ``held`` (the counters that had
    a cap; the others were not touched). ``Budget.settle`` takes it back."""

    counters: tuple[Counter, ...]
    estimate: int
    refused: Counter | None = None
    held: tuple[Counter, ...] = ()


@dataclass(frozen=True)
class Spent:
    scope: str
    period: str
    spent: int
    reserved: int
    cap: int | None
    #: the cap was set at run time (else it is the config's)
    overridden: bool

    @classmethod
    def read(cls, counter: Counter, amounts: Any, override: Any) -> Spent:
        """From the counter's ``spent``/``reserved`` fields and its run-time cap field
        (None: the config's cap holds)."""
        cap = counter.hard
        if override is not None:
            cap = None if as_str(override) == NO_CAP else int(as_str(override))
        return cls(counter.scope, counter.period, int(amounts[0] or 0),
                   int(amounts[1] or 0), cap, override is not None)


class Budget:
    """Typed wrappers of the budget scripts on a sync client."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._s = Scripts(client)

    def reserve(self, counters: Sequence[Counter], estimate: int) -> Reservation:
        """Reserve ``estimate`` under every counter that has a cap, or refuse it (then
        ``refused`` is the first counter whose cap did, and nothing was reserved)."""
        cs = tuple(counters)
        if not cs:
            return Reservation(cs, estimate)
        args: list[Any] = [estimate, max(COUNTER_TTL[c.period] for c in cs)]
        for c in cs:
            args += [c.cap_field, -1 if c.hard is None else c.hard]
        out = int(self._s["budget_reserve"](
            keys=[*(self.keys.budget(c.scope, c.period_id) for c in cs),
                  self.keys.budget_caps], args=args))
        if out > 0:
            return Reservation(cs, estimate, refused=cs[out - 1])
        return Reservation(cs, estimate, held=tuple(c for i, c in enumerate(cs)
                                                    if -out >> i & 1))

    def settle(self, reservation: Reservation, cost: int, *, day: str, kind: str,
               group: str, person: str | None, tokens: tuple[int, int, int],
               estimated: bool) -> list[str]:
        """Replace the reservation by ``cost`` (spent on every counter of it) and log
        the call (``tokens``: input, output, cached). Returns the soft budgets this call
        crossed (``scope:period``)."""
        cs, held = reservation.counters, set(reservation.held)
        args: list[Any] = [reservation.estimate, cost,
                           max((COUNTER_TTL[c.period] for c in cs),
                               default=COUNTER_TTL["day"]), LOG_TTL,
                           f"{kind}\t{group}\t{person or '-'}\t", *tokens,
                           1 if estimated else 0, int(time.time())]
        for c in cs:
            args += [c.soft_field, -1 if c.soft is None else c.soft, 1 if c in held else 0]
        out: Any = self._s["budget_settle"](
            keys=[*(self.keys.budget(c.scope, c.period_id) for c in cs),
                  self.keys.usage_log(day), self.keys.budget_soft], args=args)
        return [as_str(x) for x in out]

    def park(self, group: str, *, token: str, turn_id: str, period_id: str,
             notice_event: OutboxEvent | None, done_event: OutboxEvent) -> int:
        """Put the group's batch back in its mailbox and park the group (see
        ``lua/budget_park.lua``): -1 lock lost, 0 parked, 1 parked and chat told."""
        k = self.keys
        return int(self._s["budget_park"](
            keys=[k.lock(group), k.processing(group), k.mailbox(group), k.lease(group),
                  k.active, k.budget_parked, k.turn(turn_id), k.budget_told(group, period_id),
                  k.outbox],
            args=[token, group, COUNTER_TTL["month"],
                  notice_event.lua_arg() if notice_event else "", done_event.lua_arg()]))

    def set_cap(self, scope: str, period: str, micro_usd: int | None) -> int:
        """Set (``None``: lift) the run-time cap of ``scope`` for ``period`` and release
        the parked groups; returns how many were released."""
        self.r.hset(self.keys.budget_caps, f"{scope}:{period}",
                    NO_CAP if micro_usd is None else str(micro_usd))
        return self.unpark()

    def reset_cap(self, scope: str, period: str) -> int:
        """Back to the config's cap; releases the parked groups (it may be higher)."""
        self.r.hdel(self.keys.budget_caps, f"{scope}:{period}")
        return self.unpark()

    def unpark(self) -> int:
        return int(self._s["budget_unpark"](keys=[self.keys.budget_parked,
                                                  self.keys.active], args=[]))

    def parked(self) -> list[str]:
        return sorted(as_str(g) for g in self.r.smembers(self.keys.budget_parked))  # type: ignore[union-attr]

    def spent(self, counter: Counter) -> Spent:
        """What ``counter`` shows now, with the cap in force."""
        key = self.keys.budget(counter.scope, counter.period_id)
        return Spent.read(counter, self.r.hmget(key, ["spent", "reserved"]),
                          self.r.hget(self.keys.budget_caps, counter.cap_field))

    def soft_crossed(self) -> dict[str, float]:
        """``scope:period`` -> when its soft budget was crossed (for ``status``)."""
        raw: Any = self.r.hgetall(self.keys.budget_soft)
        return {as_str(k): float(v) for k, v in raw.items()}

    def log(self, day: str) -> dict[tuple[str, str, str], dict[str, int]]:
        """One day's calls: (kind, group, person) -> metric -> count (a metric that
        stayed 0 is absent, except cost and req: budget_settle.lua skips it)."""
        raw: Any = self.r.hgetall(self.keys.usage_log(day))
        out: dict[tuple[str, str, str], dict[str, int]] = {}
        for field, value in raw.items():
            kind, group, person, metric = as_str(field).split("\t")
            out.setdefault((kind, group, person), {})[metric] = int(value)
        return out

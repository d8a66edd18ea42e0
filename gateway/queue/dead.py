"""Dead letters and crash loops, read and managed by an operator.

A batch that failed ``max_attempts`` times sits in ``dead:{g}`` (its raw entries) with one
record per batch in ``deadlog:{g}`` (turn id, when, why), written by
``GroupQueue.dead_letter``. A turn on its second attempt or later is noted in
``retrying`` (``GroupQueue.note_retry``) until it is published or dead-lettered: a turn
whose earlier attempts recorded no error died with its worker (a signal, the OOM killer),
and one that keeps coming back is a crash loop. Both are seen from Redis alone, so they
are seen whatever runs the workers (``pynanoclaw run``, compose, systemd).

``retry`` puts a group's dead entries back into its mailbox, once (``dead_retry.lua``
moves and deletes in one step) and enqueues the drain job if none holds the lease. The
same messages make the same turn id, so it also clears that turn's record and the
``sent`` marks of its failure notice: else the retry would replay the stored notice, and
the outbox would skip the new reply's chunks as already sent. ``drop`` deletes them.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import redis

from gateway.queue.events import as_str
from gateway.queue.jobs import DrainOptions, enqueue_drain, job_queue
from gateway.queue.keys import Keys
from gateway.queue.scripts import Entry, Scripts, parse_entry


@dataclass(frozen=True)
class DeadRecord:
    """One dead-lettered batch: which turn, when (epoch s), why, how many entries."""

    turn_id: str
    at: float
    why: str
    count: int


@dataclass(frozen=True)
class Retrying:
    """A group's turn on its second attempt or later."""

    group: str
    turn_id: str
    attempts: int
    at: float
    error: str

    @property
    def crashed(self) -> bool:
        """No attempt recorded an error: the worker died mid-turn (signal, OOM)."""
        return not self.error


def _load(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(as_str(raw))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class DeadLetters:
    """Dead letters and retrying turns on one sync client."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()
        self._s = Scripts(client)

    def groups(self) -> list[str]:
        """Groups with dead letters, sorted."""
        prefix = self.keys.dead("")
        return sorted(as_str(k)[len(prefix):]
                      for k in self.r.scan_iter(match=f"{prefix}*", count=500))

    def counts(self) -> dict[str, int]:
        """Dead entries per group."""
        return {g: int(self.r.llen(self.keys.dead(g))) for g in self.groups()}  # type: ignore[arg-type]

    def entries(self, group: str) -> list[Entry]:
        """The dead entries of ``group`` in arrival order (unreadable ones skipped)."""
        out = []
        for raw in self.r.lrange(self.keys.dead(group), 0, -1):  # type: ignore[union-attr]
            try:
                out.append(parse_entry(raw))
            except ValueError:
                continue
        return sorted(out, key=lambda e: e.seq)

    def records(self, group: str) -> list[DeadRecord]:
        """Why each batch of ``group`` was moved aside, oldest first."""
        raw = self.r.lrange(self.keys.dead_log(group), 0, -1)
        return [DeadRecord(turn_id=str(d.get("turn_id", "")), at=float(d.get("at", 0.0)),
                           why=str(d.get("why", "")), count=int(d.get("count", 0)))
                for d in map(_load, raw)]  # type: ignore[arg-type]

    def retrying(self) -> list[Retrying]:
        """Turns being retried now (attempt 2 or later), by group."""
        raw: dict[Any, Any] = self.r.hgetall(self.keys.retrying)  # type: ignore[assignment]
        out = []
        for group, value in raw.items():
            d = _load(value)
            out.append(Retrying(group=as_str(group), turn_id=str(d.get("turn_id", "")),
                                attempts=int(d.get("attempts", 0)),
                                at=float(d.get("at", 0.0)), error=str(d.get("error", ""))))
        return sorted(out, key=lambda r: r.group)

    def retry(self, group: str, options: DrainOptions) -> int:
        """Put ``group``'s dead entries back into its mailbox (in order, once) and make
        sure a drain job runs them. Returns how many entries moved."""
        k = self.keys
        turns: list[str] = []
        for rec in self.records(group):
            # its record, and the sent marks under the turn's reply id (an older
            # version sent the notice under it; the notice now has its own id)
            if rec.turn_id:
                turns.append(k.turn(rec.turn_id))
                turns += [as_str(x) for x in self.r.scan_iter(
                    match=f"{k.sent(rec.turn_id, 0)[:-1]}*", count=100)]
        job_id = uuid.uuid4().hex
        moved, enqueue = self._s["dead_retry"](
            keys=[k.dead(group), k.mailbox(group), k.lease(group), k.active,
                  k.dead_log(group), *turns],
            args=[int(options.lease_ttl * 1000), group, job_id])
        if int(enqueue):
            enqueue_drain(job_queue(self.r, options.queue), group, options, job_id)
        return int(moved)

    def drop(self, group: str) -> int:
        """Delete ``group``'s dead letters. Returns how many entries were dropped."""
        with self.r.pipeline(transaction=True) as pipe:
            pipe.llen(self.keys.dead(group))
            pipe.delete(self.keys.dead(group), self.keys.dead_log(group))
            count, _ = pipe.execute()
        return int(count)

"""Scheduled tasks in Redis: only when each runs next, and who fires it.

The definitions are files (``memory_store.tasks``); Redis holds a sorted set of next
fire times (``tasks:due``, member ``<group>\\x1f<task id>``) and the claims in flight
(``tasks:claimed``). ``task_claim.lua`` hands each due run to exactly one scheduler,
however many gateways run; the claimer fires it and ``release``s the member with its
next time. A claim whose holder died comes due again after its lease with the same due
time, so the retried run has the same message id and the mailbox drops a double.
Everything here can be rebuilt from the files (the gateway's rescan), so losing Redis
loses no task.

State of one member::

    absent --schedule--> due(t) --t passed, claim--> claimed(lease) --release(next)--> due(next)
                                                          |--release(None)--> absent
                                                          '--holder died, lease over--> claim again

Workers use ``schedule``/``unschedule`` (a task created or paused by a turn) and
``publish_notice`` (telling a chat its task was paused or removed).
"""

from __future__ import annotations

import hashlib
from typing import Any

import redis

from gateway.queue.events import ReplyModel, as_str, reply
from gateway.queue.keys import Keys
from gateway.queue.scripts import Scripts

#: the sender id prefix of a message a task fires; such a sender is never more than a
#: member (``workers.prompt.role_of``), whatever the chat
TASK_SENDER_PREFIX = "task:"
SEP = "\x1f"


def member(group: str, task_id: str) -> str:
    return f"{group}{SEP}{task_id}"


def split_member(value: Any) -> tuple[str, str]:
    group, _, tid = as_str(value).rpartition(SEP)
    return group, tid


def due_key(keys: Keys) -> str:
    return f"{keys.prefix}tasks:due"


def claimed_key(keys: Keys) -> str:
    return f"{keys.prefix}tasks:claimed"


class TaskTimes:
    """The sorted set of next fire times, on a sync client (the scheduler runs its
    ticks in a thread, with the task files it reads)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._s = Scripts(client)

    def claim(self, now: float, lease: float, limit: int = 100) -> list[tuple[str, str, float]]:
        """The runs due at ``now``, claimed for ``lease`` seconds: (group, task id, due)."""
        raw = self._s["task_claim"](keys=[due_key(self.keys), claimed_key(self.keys)],
                                    args=[now, lease, limit])
        return [(*split_member(m), float(as_str(due)))
                for m, due in zip(raw[::2], raw[1::2], strict=True)]

    def release(self, group: str, task_id: str, next_at: float | None) -> None:
        """End a claim: the task runs next at ``next_at`` (None: not again)."""
        m = member(group, task_id)
        with self.r.pipeline(transaction=True) as pipe:
            if next_at is None:
                pipe.zrem(due_key(self.keys), m)
            else:
                pipe.zadd(due_key(self.keys), {m: next_at})
            pipe.hdel(claimed_key(self.keys), m)
            pipe.execute()

    def schedule(self, group: str, task_id: str, at: float, *, only_new: bool = False) -> bool:
        """Set when the task runs next; with ``only_new`` only when it has no time yet
        (a rescan must not move a run that is due or claimed). True when it was set."""
        added = self.r.zadd(due_key(self.keys), {member(group, task_id): at}, nx=only_new)
        return bool(added) or not only_new

    def unschedule(self, group: str, task_id: str) -> None:
        self.release(group, task_id, None)

    def next_at(self, group: str, task_id: str) -> float | None:
        score = self.r.zscore(due_key(self.keys), member(group, task_id))
        return None if score is None else float(score)

    def members(self) -> list[tuple[str, str]]:
        return [split_member(m) for m in self.r.zrange(due_key(self.keys), 0, -1)]


def notice_id(group: str, task_id: str, what: str, stamp: float) -> str:
    """The reply id of a notice about ``group``'s task ``task_id`` (``what``: why, and
    ``stamp``: the version of the task it is about, so a later one is sent too). A task
    id is a name, unique only within its chat, and the outbox sends each reply id once:
    the chat is part of it (hashed, since a chat id may hold any character)."""
    chat = hashlib.sha256(group.encode()).hexdigest()[:16]
    return f"task-{chat}-{task_id}-{what}-{int(stamp)}"


def publish_notice(client: redis.Redis, keys: Keys, notice: ReplyModel) -> None:
    """Put a notice (an ``Outbound``, with its own reply id) on the outbox: a chat is told
    its task was paused or removed. The outbox sends each reply id once."""
    client.xadd(keys.outbox, reply(notice).fields())  # type: ignore[arg-type]

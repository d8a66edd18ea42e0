"""A group's state, as a worker changes it: the batch, the lock, the turn record.

``GroupQueue`` wraps the scripts a drain (or consolidation) job runs, with typed
arguments and results, on a synchronous client (an RQ job's). The turn record's fields
(``TurnRecord``) are written only here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from gateway.queue.intake import as_str
from gateway.queue.keys import Keys
from gateway.queue.scripts import Scripts

#: how long a turn's progress record outlives the turn (a retry comes much sooner)
TURN_STATE_TTL = 7 * 24 * 3600

#: ``take`` results besides a batch
LOCK_LOST = -1
LOCK_BUSY = -2


@dataclass(frozen=True)
class Entry:
    """One message in a mailbox/context/processing list."""

    seq: int
    engaged: bool
    msg: dict[str, Any]
    raw: str


def encode_entry(msg_json: str, engaged: bool) -> str:
    """The JSON the inbox stores (``push.lua`` puts the arrival number in front)."""
    return json.dumps({"engaged": engaged, "msg": json.loads(msg_json)},
                      separators=(",", ":"))


def parse_entry(raw: str | bytes) -> Entry:
    """Decode ``"<seq> <json>"`` (or an older ``{"seq": .., ...}`` entry). Raises
    ``ValueError`` for anything else."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    head, sep, body = text.partition(" ")
    if sep and head.isdigit():
        seq, env = int(head), json.loads(body)
    else:
        env = json.loads(text)
        seq = int(env["seq"]) if isinstance(env, dict) and "seq" in env else -1
    if not isinstance(env, dict) or "msg" not in env or seq < 0:
        raise ValueError("malformed mailbox entry")
    return Entry(seq=seq, engaged=bool(env.get("engaged")), msg=env["msg"], raw=text)


@dataclass(frozen=True)
class TurnRecord:
    """What ``turn_begin`` found of a turn."""

    published: bool
    reply: str | None
    written: bool
    attempts: int


class LockOps:
    """The group lock's scripts (a lock key, a lease key extended with it, a token)."""

    def __init__(self, client: redis.Redis) -> None:
        self._s = Scripts(client)

    def lock_acquire(self, lock_key: str, lease_key: str, token: str, ttl_ms: int,
                     lease_ttl_ms: int) -> bool:
        return bool(int(self._s["lock_acquire"](keys=[lock_key, lease_key],
                                                args=[token, ttl_ms, lease_ttl_ms])))

    def lock_renew(self, lock_key: str, lease_key: str, token: str, ttl_ms: int,
                   lease_ttl_ms: int) -> bool:
        return bool(int(self._s["lock_renew"](keys=[lock_key, lease_key],
                                              args=[token, ttl_ms, lease_ttl_ms])))

    def lock_release(self, lock_key: str, token: str) -> bool:
        return bool(int(self._s["lock_release"](keys=[lock_key], args=[token])))


class GroupQueue:
    """The scripts of one group's drain/consolidation job, on a sync client."""

    def __init__(self, client: redis.Redis, keys: Keys, group: str) -> None:
        self.r = client
        self.keys = keys
        self.group = group
        self._s = Scripts(client)

    # -- batch --------------------------------------------------------------------------
    def take(self, token: str, lock_ttl_ms: int, lease_ttl_ms: int, *, acquire: bool
             ) -> list[str] | int:
        """The next batch (``[]``: nothing waiting), ``LOCK_LOST`` or (``acquire``)
        ``LOCK_BUSY``. With ``acquire`` the lock is taken in the same step."""
        k, g = self.keys, self.group
        out: Any = self._s["take"](
            keys=[k.lock(g), k.lease(g), k.processing(g), k.context(g), k.mailbox(g)],
            args=[token, lock_ttl_ms, lease_ttl_ms, "1" if acquire else "0"])
        if isinstance(out, int):
            return out
        return [as_str(x) for x in out]

    def finish(self, token: str, written_turn: str | None) -> int:
        """Clear the batch (marking ``written_turn``'s episode written); 1 more waiting,
        0 drained (lease and lock released), ``LOCK_LOST``."""
        k, g = self.keys, self.group
        keys = [k.lock(g), k.processing(g), k.mailbox(g), k.lease(g), k.active]
        if written_turn is not None:
            keys.append(k.turn(written_turn))
        return int(self._s["finish"](keys=keys, args=[token, g]))

    def dead_letter(self, raw: list[str]) -> None:
        self.r.rpush(self.keys.dead(self.group), *raw)

    def hand_over(self, job_id: str, lease_ttl_ms: int) -> None:
        """The lease now stands for the successor job ``job_id``."""
        self.r.set(self.keys.lease(self.group), job_id, px=lease_ttl_ms)

    # -- turn record --------------------------------------------------------------------
    def turn_begin(self, turn_id: str, typing_event: dict[str, Any] | None,
                   max_attempts: int) -> TurnRecord:
        st: Any = self._s["turn_begin"](
            keys=[self.keys.turn(turn_id), self.keys.outbox],
            args=[TURN_STATE_TTL, json.dumps(typing_event) if typing_event else "",
                  max_attempts])
        published, reply, has_reply, written, attempts = (_str(x) for x in st)
        return TurnRecord(published=bool(published),
                          reply=reply if published and has_reply == "1" else None,
                          written=bool(written), attempts=int(attempts or 0))

    def turn_publish(self, turn_id: str, lock_key: str, token: str, reply_event: str | None,
                     done_event: dict[str, Any], reply_text: str | None) -> int:
        """Publish once under the lock: -1 lock lost, 0 already published, 1 now."""
        return int(self._s["turn_publish"](
            keys=[lock_key, self.keys.outbox, self.keys.turn(turn_id)],
            args=[token, reply_event or "", json.dumps(done_event), reply_text or "",
                  "1" if reply_text else "0", TURN_STATE_TTL]))

    def mark_written(self, turn_id: str) -> None:
        self.r.hset(self.keys.turn(turn_id), "written", "1")

    def record_error(self, turn_id: str, error_class: str, message: str) -> None:
        self.r.hset(self.keys.turn(turn_id),
                    mapping={"last_error": message, "last_error_class": error_class})

    def last_error(self, turn_id: str) -> tuple[str, str]:
        cls, msg = self.r.hmget(self.keys.turn(turn_id), ["last_error_class", "last_error"])
        return _str(cls), _str(msg)

    def reflected(self, turn_id: str) -> bool:
        return bool(self.r.hget(self.keys.turn(turn_id), "reflected"))

    def mark_reflected(self, turn_id: str, lesson_id: str | None) -> None:
        self.r.hset(self.keys.turn(turn_id), "reflected", lesson_id or "-")


def _str(value: Any) -> str:
    return "" if value is None else as_str(value)

"""The queue's Lua scripts and their typed wrappers.

The scripts live in ``lua/*.lua`` beside this file and are read from disk once per
process; each client registers them (EVALSHA, with redis-py's fallback to EVAL).
``GatewayQueue`` wraps what the gateway runs (accept a message, heal a group whose drain
job died, ack outbox entries, pace sends) on an async client; ``GroupQueue`` and
``LockOps`` what a worker runs (the batch, the lock, the turn record) on a sync client.
The turn record's fields are written only here.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from gateway.queue.events import OutboxEvent, as_str
from gateway.queue.keys import OUTBOX_GROUP, Keys

LUA_DIR = Path(__file__).with_name("lua")
NAMES = ("push", "sweep", "take", "finish", "lock_acquire", "lock_renew", "lock_release",
         "turn_begin", "turn_publish", "gcra", "outcome", "amend",
         "dead_retry", "scrub", "restream", "budget_reserve", "budget_settle",
         "budget_park", "budget_unpark", "task_claim", "media_hold", "media_release")


@functools.cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua`` (read once)."""
    if name not in NAMES:
        raise KeyError(f"no Lua script {name!r}")
    return (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """The scripts registered on one client (sync or async); ``scripts[name]`` is
    callable as ``(keys=[...], args=[...])``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._registered: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        script = self._registered.get(name)
        if script is None:
            script = self._registered[name] = self._client.register_script(source(name))
        return script


#: ``push`` results
BEHIND_HOLD = -2
DUPLICATE = -1
KEPT = 0
KEPT_ENQUEUE = 1


class GatewayQueue:
    """Typed wrappers of the gateway's scripts."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._s = Scripts(client)

    async def push(self, group: str, dedupe_id: str, entry: str, *, engaged: bool,
                   dedupe_ttl: int, lease_ttl_ms: int, job_id: str,
                   behind_hold: bool = False) -> int:
        """Dedupe and append ``entry`` to the group's mailbox (engaged) or context list;
        for an engaged message take the lease for ``job_id`` if there is none.
        ``DUPLICATE``, ``KEPT``, or ``KEPT_ENQUEUE`` (the caller enqueues ``job_id``);
        with ``behind_hold``, ``BEHIND_HOLD`` (nothing done) while the group holds
        messages for their files (``gateway.queue.media``)."""
        k = self.keys
        target = k.mailbox(group) if engaged else k.context(group)
        keys = [k.dedupe(dedupe_id), k.seq(group), target, k.lease(group), k.active]
        if behind_hold:
            keys.append(k.media_hold(group))
        return int(await self._s["push"](
            keys=keys,
            args=[dedupe_ttl, entry, "1" if engaged else "0", lease_ttl_ms, group, job_id]))

    async def stale_changes(self, older_than: float, now: float) -> list[str]:
        """Groups whose oldest waiting edit, deletion or ``/forget`` is older than
        ``older_than`` seconds while no redaction job holds the group: its enqueue
        failed, or the job died for good. (A SCAN: called once a minute, not per message.)"""
        k = self.keys
        groups: set[str] = set()
        for head in (k.changes(""), k.forget("")):
            async for key in self.r.scan_iter(match=_glob_escape(head) + "*", count=500):
                name = as_str(key)
                group = name[len(head):]
                oldest = await self.r.lindex(name, 0)  # type: ignore[misc]
                if oldest is not None and _recorded_at(oldest) < now - older_than:
                    groups.add(group)
        return [g for g in sorted(groups) if not await self.r.exists(k.redacting(g))]

    async def sweep(self, group: str, lease_ttl_ms: int, job_id: str) -> bool:
        """Take the lease of ``group`` for ``job_id`` if work waits and no job holds it
        (then the caller enqueues it); drop a group with nothing waiting from ``active``."""
        k = self.keys
        return int(await self._s["sweep"](
            keys=[k.mailbox(group), k.processing(group), k.lease(group), k.active],
            args=[lease_ttl_ms, job_id, group])) == 1

    async def active_groups(self) -> list[str]:
        return [as_str(g) for g in await self.r.smembers(self.keys.active)]  # type: ignore[misc]

    async def lease(self, group: str) -> tuple[str | None, int]:
        """(job id the lease stands for, ms left), or (None, -2)."""
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.lease(group))
            pipe.pttl(self.keys.lease(group))
            value, left = await pipe.execute()
        return (None, -2) if value is None else (as_str(value), int(left))

    async def extend_lease(self, group: str, ttl_ms: int) -> None:
        await self.r.pexpire(self.keys.lease(group), ttl_ms)

    async def outbox_ack(self, entry_ids: list[str]) -> None:
        """Ack and delete handled outbox entries (at most a few hundred per call), in one
        round trip of two commands. Not atomic, and need not be: an entry acked but not
        deleted only lingers (it is never read again, and redaction's rebuild scrubs it
        like any other); one deleted but not acked is dropped by the next claim."""
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.xack(self.keys.outbox, OUTBOX_GROUP, *entry_ids)
            pipe.xdel(self.keys.outbox, *entry_ids)
            await pipe.execute()

    async def rate_wait_ms(self, channel: str, chat_id: str, interval_ms: int, burst: int
                           ) -> int:
        """0 if a send to the chat may go now (recorded), else the ms to wait."""
        return int(await self._s["gcra"](keys=[self.keys.rate(channel, chat_id)],
                                          args=[interval_ms, burst]))


    async def record_outcome(self, group: str, channel: str, reply_id: str, index: int, *,
                             delivered: bool, detail: str, ttl: int, now: int,
                             mark_sent: bool = False) -> bool:
        """Record chunk ``index`` of ``reply_id`` as delivered (``detail``: the platform's
        message id) or failed for good (``detail``: the reason); ``mark_sent`` (the
        outbox) also sets the chunk's ``sent`` key. False: already recorded."""
        k = self.keys
        keys = [k.outcome(reply_id), k.undelivered(group), k.delivery_counts]
        if mark_sent:
            keys.append(k.sent(reply_id, index))
        return int(await self._s["outcome"](
            keys=keys,
            args=[index, "delivered" if delivered else "failed", detail, reply_id, channel,
                  ttl, now])) == 1

    async def outcome(self, reply_id: str) -> dict[int, tuple[str, str]]:
        """Chunk index -> (``delivered`` | ``failed``, platform id | reason)."""
        raw: Any = await self.r.hgetall(self.keys.outcome(reply_id))  # type: ignore[misc]
        out: dict[int, tuple[str, str]] = {}
        for index, value in raw.items():
            status, _, detail = as_str(value).partition(" ")
            out[int(as_str(index))] = (status, detail)
        return out

    async def count_delivery(self, channel: str, what: str) -> None:
        """Add one to ``{channel}:{what}`` of the delivery counts (outside outcome.lua:
        an event of a send, not a chunk's outcome)."""
        await self.r.hincrby(self.keys.delivery_counts, f"{channel}:{what}", 1)  # type: ignore[misc]

    async def delivery_counts(self) -> dict[str, int]:
        raw: Any = await self.r.hgetall(self.keys.delivery_counts)  # type: ignore[misc]
        return {as_str(k): int(v) for k, v in sorted(raw.items())}

    async def waiting(self, group: str) -> list[str]:
        """The group's mailbox and context entries, as stored."""
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.lrange(self.keys.mailbox(group), 0, -1)
            pipe.lrange(self.keys.context(group), 0, -1)
            mailbox, context = await pipe.execute()
        return [as_str(x) for x in [*mailbox, *context]]

    async def amend(self, group: str, dedupe_id: str, old: str | None, new: str | None,
                    change: str, *, dedupe_ttl: int, cap: int, final: bool) -> int:
        """Replace (``new``) or remove (``new`` None) the waiting entry ``old``; if it is
        no longer waiting, append ``change`` to ``changes:{group}`` (the newest ``cap``
        kept), or with ``final`` False do nothing and return 2 (read again).
        1 applied, 0 recorded, 2 stale, ``DUPLICATE``."""
        k = self.keys
        return int(await self._s["amend"](
            keys=[k.dedupe(dedupe_id), k.mailbox(group), k.context(group), k.changes(group)],
            args=[dedupe_ttl, old or "", new or "", change, cap, "1" if final else "0"]))


#: how long a turn's progress record outlives the turn (a retry comes much sooner)
TURN_STATE_TTL = 7 * 24 * 3600
#: turns waiting for fact extraction kept per group; older ones are dropped (a group
#: whose extraction cannot keep up loses the oldest, never blocks its turns)
EXTRACT_QUEUE_MAX = 200

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
    text = as_str(raw)
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
    #: the group's undelivered mark (``undelivered``), read with it unless published
    undelivered: dict[str, str] = field(default_factory=dict)


class LockOps:
    """The group lock's scripts (a lock key, a lease key extended with it, a token). With
    no lease key (``None``) the same scripts keep a plain lock: a person's."""

    def __init__(self, client: redis.Redis) -> None:
        self._s = Scripts(client)

    def lock_acquire(self, lock_key: str, lease_key: str | None, token: str, ttl_ms: int,
                     lease_ttl_ms: int) -> bool:
        keys = [lock_key] if lease_key is None else [lock_key, lease_key]
        return bool(int(self._s["lock_acquire"](keys=keys,
                                                args=[token, ttl_ms, lease_ttl_ms])))

    def lock_renew(self, lock_key: str, lease_key: str | None, token: str, ttl_ms: int,
                   lease_ttl_ms: int) -> bool:
        keys = [lock_key] if lease_key is None else [lock_key, lease_key]
        return bool(int(self._s["lock_renew"](keys=keys,
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

    def finish(self, token: str, written_turn: str | None, extract: str | None = None
               ) -> tuple[int, int]:
        """Clear the batch, marking ``written_turn``'s episode written and counting it,
        and (``extract``, an entry for the extraction job) queueing it for extraction
        in the same step. Returns (1 more waiting | 0 drained, lease and lock released |
        ``LOCK_LOST``, the group's episodes since its last consolidation; 0 without a
        turn)."""
        k, g = self.keys, self.group
        keys = [k.lock(g), k.processing(g), k.mailbox(g), k.lease(g), k.active]
        args: list[str | int] = [token, g]
        if written_turn is not None:
            keys += [k.turn(written_turn), k.episodes(g)]
            if extract is not None:
                keys.append(k.extractions(g))
                args += [extract, EXTRACT_QUEUE_MAX]
        status, episodes = self._s["finish"](keys=keys, args=args)
        return int(status), int(episodes)

    def undelivered(self) -> dict[str, str]:
        """The group's newest reply that failed for good (reply_id, reason, at), if any
        later reply has not been delivered since; empty otherwise."""
        raw: Any = self.r.hgetall(self.keys.undelivered(self.group))
        return {as_str(k): as_str(v) for k, v in raw.items()}

    def dead_letter(self, raw: list[str], *, turn_id: str = "", why: str = "") -> None:
        """Move a batch aside for an operator (``gateway.queue.dead``), with a record of
        which turn, when and why."""
        record = json.dumps({"turn_id": turn_id, "at": time.time(), "why": why,
                             "count": len(raw)})
        with self.r.pipeline(transaction=True) as pipe:
            pipe.rpush(self.keys.dead(self.group), *raw)
            pipe.rpush(self.keys.dead_log(self.group), record)
            pipe.execute()

    def hand_over(self, job_id: str, lease_ttl_ms: int) -> None:
        """The lease now stands for the successor job ``job_id``."""
        self.r.set(self.keys.lease(self.group), job_id, px=lease_ttl_ms)

    # -- redaction ----------------------------------------------------------------------
    def held_entries(self) -> list[str]:
        """Every entry the group's lists hold now (context, mailbox, processing, dead):
        where a deleted or forgotten message's words may still be."""
        with self.r.pipeline(transaction=False) as pipe:
            for key in self._held_lists():
                pipe.lrange(key, 0, -1)
            lists = pipe.execute()
        return [as_str(x) for items in lists for x in items]

    def scrub(self, pairs: list[tuple[str, str | None]], lists: list[str] | None = None
              ) -> int:
        """Replace each held entry ``old`` by ``new`` (None: remove it), atomically
        (``scrub.lua``), in ``lists`` (default: those of ``held_entries``). Returns how
        many were found and changed."""
        if not pairs:
            return 0
        args = [x for old, new in pairs for x in (old, new or "")]
        return int(self._s["scrub"](keys=lists or self._held_lists(), args=args))

    def _held_lists(self) -> list[str]:
        k, g = self.keys, self.group
        return [k.context(g), k.mailbox(g), k.processing(g), k.dead(g)]

    def local_reply_streams(self) -> list[str]:
        """The local channel's reply streams of this group, one per account
        (``<prefix>local:out:<account>:<chat id>``, named by ``channels.local``), for
        redaction; none for another channel's group."""
        channel, _, chat = self.group.partition(":")
        if channel != "local":
            return []
        glob = f"{_glob_escape(self.keys.prefix)}local:out:*:{_glob_escape(chat)}"
        return sorted(as_str(k) for k in self.r.scan_iter(match=glob, count=1000))

    def restream(self, stream: str, replace: dict[str, list[str]]) -> int:
        """Rebuild ``stream`` (the outbox, a reply stream) from its live entries, each
        of ``replace`` (entry id -> its new field/value list) replaced, keeping its ids,
        consumer groups and pending entries (``restream.lua``): what ``XDEL`` only
        marked deleted leaves the listpacks. Returns how many entries it holds."""
        args = [x for entry_id, fields in replace.items()
                for x in (entry_id, json.dumps(fields))]
        return int(self._s["restream"](keys=[stream], args=args))

    def delivered(self, reply_id: str) -> list[str]:
        """The platform ids of the reply's chunks the platform accepted (``outcome.lua``:
        ``delivered <platform id>``), as long as the outcome is kept."""
        raw: Any = self.r.hvals(self.keys.outcome(reply_id))
        return sorted(v.removeprefix("delivered ") for v in map(as_str, raw)
                      if v.startswith("delivered "))

    def replace_turn_reply(self, turn_id: str, text: str) -> None:
        """Overwrite the kept reply text of ``turn_id`` (redaction), if it still exists."""
        key = self.keys.turn(turn_id)
        if self.r.hexists(key, "reply"):
            self.r.hset(key, "reply", text)

    # -- turn record --------------------------------------------------------------------
    def turn_begin(self, turn_id: str, typing_event: OutboxEvent | None,
                   max_attempts: int) -> TurnRecord:
        st: Any = self._s["turn_begin"](
            keys=[self.keys.turn(turn_id), self.keys.outbox,
                  self.keys.undelivered(self.group)],
            args=[TURN_STATE_TTL, typing_event.lua_arg() if typing_event else "",
                  max_attempts])
        published, reply, has_reply, written, attempts = (_str(x) for x in st[:5])
        mark = [as_str(x) for x in st[5]] if len(st) > 5 else []
        return TurnRecord(published=bool(published),
                          reply=reply if published and has_reply == "1" else None,
                          written=bool(written), attempts=int(attempts or 0),
                          undelivered=dict(zip(mark[::2], mark[1::2], strict=True)))

    def turn_publish(self, turn_id: str, lock_key: str, token: str,
                     reply_event: OutboxEvent | None, done_event: OutboxEvent,
                     reply_text: str | None) -> int:
        """Publish once under the lock: -1 lock lost, 0 already published, 1 now."""
        return int(self._s["turn_publish"](
            keys=[lock_key, self.keys.outbox, self.keys.turn(turn_id)],
            args=[token, reply_event.lua_arg() if reply_event else "", done_event.lua_arg(),
                  reply_text or "", "1" if reply_text else "0"]))

    def mark_written(self, turn_id: str) -> None:
        self.r.hset(self.keys.turn(turn_id), "written", "1")

    def note_retry(self, turn_id: str, attempts: int) -> None:
        """Record that the group's turn is on attempt ``attempts`` (2 or more), with the
        last error it recorded (none: the worker died mid-turn), for ``status``/healthz."""
        cls, msg = self.last_error(turn_id)
        self.r.hset(self.keys.retrying, self.group, json.dumps({
            "turn_id": turn_id, "attempts": attempts, "at": time.time(),
            "error": f"{cls}: {msg}" if cls else ""}))

    def clear_retry(self) -> None:
        self.r.hdel(self.keys.retrying, self.group)

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


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _recorded_at(raw: bytes | str) -> float:
    """When a change or ``/forget`` request was recorded (epoch seconds): ``at`` is ISO
    8601 in a change (the platform's time) and epoch seconds in a request. A record that
    does not say counts as old, so it is never left waiting."""
    try:
        at = json.loads(raw).get("at")
    except (ValueError, AttributeError):
        return 0.0
    if isinstance(at, int | float):
        return float(at)
    if isinstance(at, str):
        try:
            return datetime.fromisoformat(at).timestamp()
        except ValueError:
            return 0.0
    return 0.0

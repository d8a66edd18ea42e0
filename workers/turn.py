"""One agent turn over one batch, idempotent under retries.

A batch is what sat in the group's ``processing`` list: context and engaged messages,
each wrapped as ``{"seq": n, "engaged": bool, "msg": Inbound}``. The turn id is derived
from the batch's message ids, so a turn retried after a crash has the same id. Redis
keeps the turn's progress in ``turn:{id}``: once ``published`` is set (atomically with
the reply's XADD, and only while this worker holds the group lock) a retry never
publishes again and reuses the stored reply; once ``written`` is set the episode is not
written again (and ``memory_store`` dedupes the write by id besides).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from channels.keys import Keys
from channels.models import Inbound, Outbound
from memory_store import BaseMemory, GroupDirectory
from memory_store.cache import MemoryCache
from workers.agent import TurnError, TurnRequest, build_agent
from workers.lock import GroupLock, LockLost
from workers.prompt import content_trust
from workers.reflection import reflect_on_failure
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

#: how long a turn's progress record outlives the turn (a retry comes much sooner)
TURN_STATE_TTL = 7 * 24 * 3600
#: open group memories kept per worker process: opening and closing one costs more than
#: a whole turn with a fast model; each may hold an inotify instance (a scarce resource)
MEMORY_CACHE_SIZE = 16

_memories = MemoryCache(max_groups=MEMORY_CACHE_SIZE)


def group_memory(data_dir: Path, group: str, backend: str) -> tuple[GroupDirectory, BaseMemory]:
    """The group's directory (ensured) and its open memory, from the per-process cache
    (LRU bounded by count and memory, see memory_store/cache.py).

    Safe to keep open across turns: turns of one group never overlap (the group lock),
    and the memory's index notices files other workers or people changed.
    """
    return _memories.get(data_dir, group, backend)


@atexit.register
def close_memories() -> None:
    _memories.close()

# KEYS: lock, outbox, turn   ARGV: token, reply event json or "", done event json,
#       reply text, has_reply 1/0, state ttl s
# Returns -1 lock lost, 0 already published, 1 published now.
_PUBLISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[3], 'published') then return 0 end
if ARGV[2] ~= '' then
  redis.call('XADD', KEYS[2], '*', 'type', 'reply', 'data', ARGV[2])
end
redis.call('XADD', KEYS[2], '*', 'type', 'done', 'data', ARGV[3])
redis.call('HSET', KEYS[3], 'published', '1', 'reply', ARGV[4], 'has_reply', ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[6])
return 1
"""


# KEYS: turn, outbox   ARGV: state ttl s, typing event json or "", max attempts
# One round trip to start a turn: reads its progress and, unless it was published,
# counts the attempt and (within max attempts) shows the typing indicator.
# Returns [published, reply, has_reply, written, attempts] (nil where unset).
_BEGIN = """
local st = redis.call('HMGET', KEYS[1], 'published', 'reply', 'has_reply', 'written', 'attempts')
if st[1] then return st end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('EXPIRE', KEYS[1], ARGV[1])
st[5] = n
if ARGV[2] ~= '' and n <= tonumber(ARGV[3]) then
  redis.call('XADD', KEYS[2], '*', 'type', 'typing', 'data', ARGV[2])
end
return st
"""


@dataclass(frozen=True)
class Batch:
    """The messages of one turn, in arrival order."""

    group: str
    messages: list[Inbound]
    engaged_ids: list[str]
    raw: list[bytes]

    @property
    def turn_id(self) -> str:
        return turn_id_for(self.group, [m.dedupe_id for m in self.messages])

    @property
    def anchor(self) -> Inbound:
        """The message a reply answers: the last engaged one (else the last one)."""
        engaged = set(self.engaged_ids)
        for msg in reversed(self.messages):
            if msg.message_id in engaged:
                return msg
        return self.messages[-1]


def turn_id_for(group: str, dedupe_ids: Sequence[str]) -> str:
    """Stable id of the turn over exactly these messages."""
    digest = hashlib.sha256("\n".join([group, *dedupe_ids]).encode()).hexdigest()
    return f"turn-{digest[:32]}"


def parse_batch(group: str, raw: Sequence[bytes | str]) -> Batch:
    """Decode a ``processing`` list. Raises ``ValueError`` for a malformed entry."""
    envelopes: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for item in raw:
        blob = item if isinstance(item, bytes) else item.encode()
        env = json.loads(blob)
        if not isinstance(env, dict) or "msg" not in env or "seq" not in env:
            raise ValueError(f"malformed mailbox entry in {group}")
        envelopes.append(env)
        blobs.append(blob)
    envelopes.sort(key=lambda e: int(e["seq"]))
    messages = [Inbound.model_validate(e["msg"]) for e in envelopes]
    engaged = [m.message_id for m, e in zip(messages, envelopes, strict=True) if e["engaged"]]
    return Batch(group=group, messages=messages, engaged_ids=engaged, raw=blobs)


def episode_text(batch: Batch, reply: str | None) -> str:
    """The episode file's body: who said what, then the bot's answer."""
    lines = [f"Turn in {batch.group}.", ""]
    engaged = set(batch.engaged_ids)
    for m in batch.messages:
        mark = "" if m.message_id in engaged else " (context)"
        when = m.received_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"- [{when}] {m.sender_name} ({m.sender_id}){mark}: {m.text}")
    lines.append("")
    lines.append(f"Bot: {reply}" if reply else "Bot: (no reply)")
    return "\n".join(lines) + "\n"


def episode_trust(messages: Sequence[Inbound], admins: Collection[str] = ()) -> float:
    """An episode is as trustworthy as the least trusted words it records: a forward or
    a quote in the batch lowers it to quoted trust, whoever posted it."""
    return min((content_trust(m, admins) for m in messages), default=0.0)


def resolve_data_dir(settings: WorkerSettings) -> Path:
    """``data_dir`` as the gateway resolves it: relative to the config file's directory."""
    data_dir = settings.data_dir.expanduser()
    if not data_dir.is_absolute() and settings.config_path is not None:
        data_dir = Path(settings.config_path).parent / data_dir
    return data_dir.resolve()


class TurnRunner:
    """Runs turns for one group's batches inside a drain job."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: WorkerSettings) -> None:
        self._r = client
        self._keys = keys
        self._settings = settings
        self._data_dir = resolve_data_dir(settings)
        self._publish = self._r.register_script(_PUBLISH)
        self._begin = self._r.register_script(_BEGIN)
        #: the turn key whose ``written`` flag the last ``run(mark_written=False)`` left
        self.unmarked_written: str | None = None

    def _event(self, msg: Inbound, **extra: Any) -> dict[str, Any]:
        return {"channel": msg.channel, "account": msg.account, "chat_id": msg.chat_id,
                "thread_id": msg.thread_id, **extra}

    def dead_letter(self, batch: Batch, lock: GroupLock, why: str) -> None:
        """Move a batch that keeps failing aside, and tell the chat's clients it is done."""
        log.error("turn %s in %s failed too often (%s); moved to %s",
                  batch.turn_id, batch.group, why, self._keys.dead(batch.group))
        self._r.rpush(self._keys.dead(batch.group), *batch.raw)
        done = self._event(batch.anchor, message_ids=[m.message_id for m in batch.messages],
                           reply_id=None, turn_id=batch.turn_id)
        self._publish(
            keys=[lock.lock_key, self._keys.outbox, self._keys.turn(batch.turn_id)],
            args=[lock.token, "", json.dumps(done), "", "0", TURN_STATE_TTL],
        )

    async def run(self, batch: Batch, lock: GroupLock, max_attempts: int, *,
                  mark_written: bool = True) -> str:
        """Run (or finish a crashed run of) the turn over ``batch``.

        With ``mark_written=False`` the turn's ``written`` flag is left to the caller (the
        drain job sets it in its finish script, saving a round trip): the turn's key is
        then in ``unmarked_written`` (else ``None``). Until it is set, a retry writes the
        episode again, which ``memory_store`` dedupes by id.

        Returns "published", "replayed" (already published by an earlier attempt) or
        "dead" (moved aside after ``max_attempts``). Raises ``LockLost`` if the lock was
        lost before publishing, and whatever the agent raised (the job is retried).
        """
        self.unmarked_written = None
        k = self._keys
        turn_key = k.turn(batch.turn_id)
        anchor = batch.anchor
        typing = json.dumps(self._event(anchor)) if batch.engaged_ids else ""
        published, stored_reply, has_reply, written, attempts = self._begin(
            keys=[turn_key, k.outbox], args=[TURN_STATE_TTL, typing, max_attempts])
        gd, memory = group_memory(self._data_dir, batch.group, self._settings.memory.backend)
        outcome = "replayed"
        if published:
            reply_text: str | None = (
                _text(stored_reply) if stored_reply is not None and _text(has_reply) == "1"
                else None)
        else:
            if int(attempts) > max_attempts:
                self.dead_letter(batch, lock, f"{int(attempts) - 1} attempts")
                await reflect_on_failure(self._r, turn_key, memory, self._settings,
                                         group=batch.group, turn_id=batch.turn_id, dead=True,
                                         message_ids=[m.message_id for m in batch.messages],
                                         attempts=int(attempts) - 1)
                return "dead"
            agent = build_agent(self._settings)
            try:
                reply = await agent.run(TurnRequest(
                    group=batch.group, turn_id=batch.turn_id, messages=batch.messages,
                    core=gd.core_memory(), memory=memory, now=datetime.now(UTC),
                    engaged_ids=batch.engaged_ids,
                ))
            except TurnError as err:
                await reflect_on_failure(self._r, turn_key, memory, self._settings,
                                         group=batch.group, turn_id=batch.turn_id, error=err,
                                         message_ids=[m.message_id for m in batch.messages],
                                         attempts=int(attempts))
                raise
            lock.check()
            reply_text = reply.text if reply.text and reply.text.strip() else None
            reply_event = ""
            if reply_text is not None:
                out = Outbound(channel=anchor.channel, account=anchor.account,
                               chat_id=anchor.chat_id, thread_id=anchor.thread_id,
                               text=reply_text, reply_to_id=anchor.message_id,
                               reply_id=batch.turn_id)
                reply_event = out.model_dump_json()
            done = self._event(anchor, message_ids=[m.message_id for m in batch.messages],
                               reply_id=batch.turn_id if reply_text else None,
                               turn_id=batch.turn_id)
            published = int(self._publish(
                keys=[lock.lock_key, k.outbox, turn_key],
                args=[lock.token, reply_event, json.dumps(done), reply_text or "",
                      "1" if reply_text else "0", TURN_STATE_TTL],
            ))
            if published == -1:
                raise LockLost(lock.lock_key)
            outcome = "published" if published == 1 else "replayed"
        if not written:
            lock.check()
            await memory.write(episode_text(batch, reply_text), kind="episode", metadata={
                "id": batch.turn_id,
                "source": f"{batch.group}:msg/" + ",".join(m.message_id for m in batch.messages),
                "message_ids": [m.message_id for m in batch.messages],
                "participants": sorted({f"{m.sender_name} ({m.channel}:{m.sender_id})"
                                        for m in batch.messages}),
                "trust": episode_trust(batch.messages, self._settings.admins),
                "created": datetime.now(UTC).isoformat(),
            })
            if mark_written:
                self._r.hset(turn_key, "written", "1")
            else:
                self.unmarked_written = turn_key
        return outcome


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

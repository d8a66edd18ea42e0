"""Dead letters for an operator: list and retry. Plain functions over a sync Redis
client, so ``pynanoclaw dead`` and the console share them; the queue operations
themselves (a drop is one) are ``gateway.queue.DeadLetters``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from channels.base import SKIPPED_KEY
from gateway.config import Settings
from gateway.intake._inbox import drain_options
from gateway.queue import DeadLetters, DeadRecord, Keys, as_str


@dataclass(frozen=True)
class DeadMessage:
    """One message of a dead batch, as an operator reads it."""

    seq: int
    message_id: str
    sender: str
    received_at: str
    text: str


@dataclass(frozen=True)
class DeadGroup:
    """A group's dead letters: its messages in arrival order and why they failed."""

    group: str
    messages: list[DeadMessage]
    records: list[DeadRecord]


def list_dead(client: redis.Redis, group: str | None = None) -> list[DeadGroup]:
    """The dead letters of ``group`` (every group with some when ``None``)."""
    dead = DeadLetters(client)
    out = []
    for g in [group] if group else dead.groups():
        messages = [DeadMessage(seq=e.seq, message_id=str(e.msg.get("message_id", "")),
                                sender=str(e.msg.get("sender_name") or e.msg.get("sender_id")
                                           or ""),
                                received_at=str(e.msg.get("received_at", "")),
                                text=str(e.msg.get("text", "")))
                    for e in dead.entries(g)]
        if messages:
            out.append(DeadGroup(group=g, messages=messages, records=dead.records(g)))
    return out


@dataclass(frozen=True)
class SkippedInbound:
    """What one channel account skipped on arrival, never queued (a mail too big or
    unreadable): nothing to retry, shown so it is not lost silently."""

    channel: str
    account: str
    records: list[dict[str, object]]

    def line(self, record: dict[str, object]) -> str:
        where = f"uid {record['uid']} in {record.get('folder')}: " if "uid" in record else ""
        return f"{record.get('at', '?')}  {where}{record.get('reason', '?')}"


def list_skipped(client: redis.Redis) -> list[SkippedInbound]:
    """Every channel account's skipped inbound (``channels.base.SKIPPED_KEY`` in its
    cursor store), by channel and account."""
    keys = Keys()
    template = keys.cursor("\0", "\0", SKIPPED_KEY)  # where channel and account stand
    head, tail = template[:template.index("\0")], template[template.rindex("\0") + 1:]
    found = []
    for raw in client.scan_iter(match=keys.cursor("*", "*", SKIPPED_KEY), count=200):
        key = as_str(raw)
        channel, _, account = key[len(head):len(key) - len(tail)].partition(":")
        value = client.get(key)
        try:
            records = json.loads(value) if value else []
        except ValueError:
            records = [{"reason": "unreadable record"}]
        if isinstance(records, list) and records:
            found.append(SkippedInbound(channel, account,
                                        [r for r in records if isinstance(r, dict)]))
    return sorted(found, key=lambda s: (s.channel, s.account))


def retry_dead(client: redis.Redis, config: Settings, group: str | None = None
               ) -> dict[str, int]:
    """Put the dead letters of ``group`` (all groups when ``None``) back into their
    mailboxes, in order, once. Returns entries moved per group."""
    dead = DeadLetters(client, Keys())
    options = drain_options(config, dead.keys)
    groups = [group] if group else dead.groups()
    moved = {g: dead.retry(g, options) for g in groups}
    return {g: n for g, n in moved.items() if n}


def when(epoch: float) -> str:
    """An epoch time as an operator reads it (UTC)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

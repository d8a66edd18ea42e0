"""Dead letters for an operator: list, retry, drop. Plain functions over a sync Redis
client, so ``pynanoclaw dead`` and the console share them; the queue operations
themselves are ``gateway.queue.DeadLetters``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from gateway.config import GatewayConfig
from gateway.inbox import drain_options
from gateway.queue import DeadLetters, DeadRecord, Keys


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


def list_dead(client: redis.Redis, group: str | None = None, keys: Keys | None = None
              ) -> list[DeadGroup]:
    """The dead letters of ``group`` (every group with some when ``None``)."""
    dead = DeadLetters(client, keys)
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


def retry_dead(client: redis.Redis, config: GatewayConfig, group: str | None = None
               ) -> dict[str, int]:
    """Put the dead letters of ``group`` (all groups when ``None``) back into their
    mailboxes, in order, once. Returns entries moved per group."""
    dead = DeadLetters(client, Keys())
    options = drain_options(config, dead.keys)
    groups = [group] if group else dead.groups()
    moved = {g: dead.retry(g, options) for g in groups}
    return {g: n for g, n in moved.items() if n}


def drop_dead(client: redis.Redis, group: str, keys: Keys | None = None) -> int:
    """Delete the dead letters of ``group``. Returns how many entries went."""
    return DeadLetters(client, keys).drop(group)


def when(epoch: float) -> str:
    """An epoch time as an operator reads it (UTC)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

"""The schema version of what the project keeps in Redis, checked by every process.

Mailboxes, turn state, the outbox stream, dedupe keys and the rest outlive the process
that wrote them, so their layout and record formats carry one version, in one key
(``Keys.schema``, ``<prefix>schema``). The first gateway or worker to start on an empty
Redis stamps it (``SET NX``); a process finding a newer version refuses to start, naming
both versions, rather than misreading records a newer release wrote. Version 1 is the
layout drawn in ``gateway/queue/__init__.py``; a future change bumps it and adds its
migration here.
"""

from __future__ import annotations

import redis

from gateway.queue.events import as_str
from gateway.queue.keys import Keys

REDIS_SCHEMA_VERSION = 1


class RedisSchemaTooNew(RuntimeError):
    """Redis holds data a newer PyNanoClaw wrote."""


def check_redis_schema(client: redis.Redis, keys: Keys) -> int:
    """Stamp an unstamped Redis with :data:`REDIS_SCHEMA_VERSION` and return the version
    found; raise :class:`RedisSchemaTooNew` for a newer one."""
    client.set(keys.schema, REDIS_SCHEMA_VERSION, nx=True)
    raw = client.get(keys.schema)
    text = as_str(raw)
    if not text.isdigit():
        raise RedisSchemaTooNew(f"Redis key {keys.schema} holds {text[:40]!r}, not a schema "
                                f"version; set it to {REDIS_SCHEMA_VERSION} if this is "
                                "PyNanoClaw's Redis")
    found = int(text)
    if found > REDIS_SCHEMA_VERSION:
        raise RedisSchemaTooNew(
            f"Redis holds schema version {found} (key {keys.schema}), but this PyNanoClaw "
            f"reads up to version {REDIS_SCHEMA_VERSION}: run the newer version that wrote "
            "it, or point [redis] url at another database")
    return found

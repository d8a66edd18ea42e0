"""A Redis that answers but refuses writes, told apart from one that is down.

Valkey answers ``-MISCONF`` to every write (and to PING) while it cannot write its
append-only file (a full disk), ``-OOM`` to writes over ``maxmemory`` with
``noeviction``, ``-READONLY`` on a replica. Such a server is alive: callers wait and
retry (it resumes by itself once space is back) rather than treat it as a bug or a
dead peer, and report the cause.
"""

from __future__ import annotations

import redis

#: error codes of a live server that refuses writes (redis-py strips the codes it maps
#: to a class, OOM and READONLY, so those are told by class)
REFUSAL_CODES = ("MISCONF", "OOM", "READONLY", "NOREPLICAS")


def refused_write(err: BaseException) -> str | None:
    """The cause, one line, when ``err`` is a live server refusing a write; else None."""
    if not isinstance(err, redis.ResponseError):
        return None
    text = " ".join(str(err).split())
    if isinstance(err, redis.OutOfMemoryError):
        return f"OOM {text}"[:200]
    if isinstance(err, redis.ReadOnlyError):
        return f"READONLY {text}"[:200]
    # a script's refused call comes back with the code inside its message
    if any(f" {code} " in f" {text} " for code in REFUSAL_CODES):
        return text[:200]
    return None

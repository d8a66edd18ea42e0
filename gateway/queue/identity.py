"""Who a sender is across channels, as the workers read it.

A person is a set of accounts (user keys ``<channel>:<sender_id>``, as ``[policy]
allow`` writes them). Two sources, in this order:

1. the operator's ``[identities.<name>]`` in the config: always hold, and win over
2. links made in chat with ``/link`` codes (``gateway.intake._identity``), kept in the Redis
   hash ``Keys.identity_links`` (persisted with Redis: AOF in the shipped config).

The person id names their directory, ``<data>/persons/<id>/`` (``memory_store`` makes
the path safe). Whether group turns may see the person's profile is the flag in
``Keys.identity_share`` (off unless the person said ``/share profile on``).

This module reads; the gateway writes (``gateway/intake/_identity.py``). Both use these
functions so the precedence is decided in one place.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from gateway.queue.events import as_str
from gateway.queue.keys import Keys

#: the config's links (``Settings.person_of``): user key -> person, or None
Configured = Callable[[str], "str | None"]

#: the value of ``Keys.identity_share`` that lets group turns see the profile
SHARE_PROFILE = "profile"


def resolve(configured: Configured, user: str, linked: object) -> str | None:
    """The person ``user`` is: the config's identity, else the ``/link`` one
    (``linked``, the raw Redis value, may be None)."""
    return configured(user) or (None if linked is None else as_str(linked))


class Identities:
    """Synchronous reads for a worker (its Redis client is synchronous)."""

    def __init__(self, configured: Configured, client: redis.Redis, keys: Keys) -> None:
        self._configured = configured
        self._r = client
        self._keys = keys

    def person_of(self, user: str) -> str | None:
        return resolve(self._configured, user, self._r.hget(self._keys.identity_links, user))

    def shares_profile(self, person: str) -> bool:
        value = self._r.hget(self._keys.identity_share, person)
        return value is not None and as_str(value) == SHARE_PROFILE

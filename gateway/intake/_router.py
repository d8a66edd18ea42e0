"""Who is it, which group, does it engage the bot? Pure decisions, no I/O.

DMs always engage. A group message engages by the group's rule (``[groups."<key>"]
engage`` or ``[engage] default``): ``mention`` = an @mention of the bot or a trigger
word, ``trigger`` = a trigger word only, ``always`` = every message. A group message
that does not engage is still kept (as context for the group's next turn).
Policies (``[policy] dm`` / ``groups``): ``open`` lets everyone in; ``allowlist`` only
the keys in ``allow`` (group keys for groups; group or user keys for DMs; admins are
always let in for DMs); ``pairing`` is ``allowlist`` plus the people the operator
approved in the pairing store (gateway/intake/_pairing.py, Redis): the caller looks that up
and passes ``paired``, so a missing lookup fails closed. A sender the platform does not
vouch for (``Inbound.authenticated`` false: mail without a passing DMARC verdict) is a
stranger wherever it writes: it is in no allowlist and cannot be paired or be an admin,
so only ``[policy] dm = "open"`` lets it in (and, for a group, the group's policy).
Edits and deletions (``Inbound.kind``) get ``CHANGE`` (an edit only from an allowed
sender): they never engage and never join the context as new words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from channels.models import Inbound
from gateway.config import Settings


class Disposition(StrEnum):
    """What the inbox does with a message."""

    ENGAGE = "engage"  # goes to the mailbox, starts/joins a turn
    CONTEXT = "context"  # kept for the next turn, no turn of its own
    DROP = "drop"  # not allowed by policy
    CHANGE = "change"  # an edit/deletion: applied to a waiting message or recorded


@dataclass(frozen=True)
class Route:
    group: str
    disposition: Disposition
    reason: str


@lru_cache(maxsize=256)
def _trigger_pattern(words: tuple[str, ...]) -> re.Pattern[str] | None:
    cleaned = [w.strip() for w in words if w.strip()]
    if not cleaned:
        return None
    alternatives = "|".join(re.escape(w) for w in cleaned)
    # whole words only: "claw" triggers on "hey claw," but not on "clawback"
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


class Router:
    """Decides the ``Route`` of each inbound message from the configuration."""

    def __init__(self, config: Settings) -> None:
        self._cfg = config
        self._allow = frozenset(config.policy.allow)
        self._admins = frozenset(config.policy.admins)

    def allowed(self, msg: Inbound, paired: bool = False) -> bool:
        """``paired``: the pairing store approved this sender (only it can know)."""
        policy = self._cfg.policy
        group = msg.group
        if not msg.authenticated and policy.dm != "open":
            return False  # its sender_id is a claim: a stranger, in a DM or not
        if not msg.is_group:
            if policy.dm == "open":
                return True
            user = msg.sender_key
            listed = user in self._admins or user in self._allow or group in self._allow
            return listed or (policy.dm == "pairing" and paired)
        return policy.groups == "open" or group in self._allow

    def engages(self, msg: Inbound) -> tuple[bool, str]:
        if not msg.is_group:
            return True, "dm"
        override = self._cfg.groups.get(msg.group)
        mode = (override.engage if override and override.engage else None) or \
            self._cfg.engage.default
        if mode == "always":
            return True, "always"
        words = (
            override.trigger_words
            if override is not None and override.trigger_words is not None
            else self._cfg.engage.trigger_words
        )
        pattern = _trigger_pattern(tuple(words))
        if pattern is not None and pattern.search(msg.text):
            return True, "trigger"
        if mode == "mention" and msg.mentions_bot:
            return True, "mention"
        return False, "not addressed"

    def route(self, msg: Inbound, paired: bool = False) -> Route:
        group = msg.group
        if msg.kind != "message":
            # Edits and deletions never start a turn or join the context as new words:
            # they change a waiting message or are recorded (gateway/intake/_changes.py). A
            # deletion carries no words and can only touch its own chat's messages, so
            # it passes even when the platform does not say who deleted.
            if msg.kind == "edit" and not self.allowed(msg, paired):
                return Route(group, Disposition.DROP, "edit from a sender not allowed")
            return Route(group, Disposition.CHANGE, f"{msg.kind} of {msg.original_id}")
        if not self.allowed(msg, paired):
            kind = "group" if msg.is_group else "dm"
            return Route(group, Disposition.DROP, f"{kind} not in [policy] allow")
        engaged, reason = self.engages(msg)
        return Route(group, Disposition.ENGAGE if engaged else Disposition.CONTEXT, reason)

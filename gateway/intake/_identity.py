"""Identity links made in chat: ``/link`` codes, the links, the sharing flag.

The flow (every step a Redis command, so it survives a gateway restart as Redis does)::

    account A, in a DM:  /link        -> a one-time code (CODE_TTL), A's only live one
    account B, in a DM:  /link CODE   -> whose code it is, and what linking means;
                                         nothing changes
    account B, in a DM:  /link CODE confirm
                                      -> the code is taken (GETDEL: at most once);
                                         A and B are now one person (a new id, or the
                                         person one of them already is)
    a wrong, expired or already used code changes nothing and says so
    any linked account:  /link off    -> what unlinking would do; /link off confirm
                                         undoes every /link link of that person

The config's ``[identities]`` always hold (``gateway.queue.identity.resolve``): an
account listed there is never re-linked by chat, and two accounts that already belong to
different people are not merged (the operator decides that, in the config). Key names
live in ``gateway.queue.keys``; workers read the same keys (``gateway.queue.identity``).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import redis

from channels.models import Inbound
from gateway.config import Settings
from gateway.config.sections import LINKED_PREFIX
from gateway.intake._pairing import ALPHABET, CODE_LENGTH, normalize_code
from gateway.queue import Keys, as_str
from gateway.queue.identity import SHARE_PROFILE, Identities

#: how long a ``/link`` code is valid: enough to open the other app, short enough that a
#: code seen over a shoulder is soon worthless
CODE_TTL = 600
INVALID_CODE = ("That code is not valid: it is wrong, expired or already used. Nothing was "
                "linked. Send /link in your other DM for a new one.")


@dataclass(frozen=True)
class LinkOutcome:
    ok: bool
    text: str
    person: str | None = None


class IdentityStore(Identities):
    """The gateway's reads (the workers' own, ``Identities``) and writes of identity
    state, on a sync client (the chat commands run in a thread:
    ``gateway.intake._commands.answer``)."""

    def __init__(self, settings: Settings, client: redis.Redis, keys: Keys,
                 code_ttl: int = CODE_TTL) -> None:
        super().__init__(settings.person_of, client, keys)
        self._settings = settings
        self.code_ttl = code_ttl

    def members(self, person: str) -> list[str]:
        """Every account of ``person``: the config's, then the linked ones."""
        configured = self._settings.identities.get(person)
        return [*(configured.members if configured else []), *self._chat_links(person)]

    def issue_code(self, msg: Inbound) -> str:
        """A fresh one-time code for the sender; their previous live code stops working."""
        user = msg.sender_key
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        old = self._r.get(self._keys.link_pending(user))
        entry = json.dumps({"user": user, "name": msg.sender_name})
        with self._r.pipeline(transaction=True) as pipe:
            if old is not None:
                pipe.delete(self._keys.link_code(as_str(old)))
            pipe.set(self._keys.link_code(code), entry, ex=self.code_ttl)
            pipe.set(self._keys.link_pending(user), code, ex=self.code_ttl)
            pipe.execute()
        return code

    def preview(self, code: str, msg: Inbound) -> str:
        """What redeeming ``code`` from ``msg``'s account would do, changing nothing (the
        code stays live). The person who sends a code joins the account that asked for
        it, and that account then reads what they say here: someone talked into sending
        a stranger's code must see whose it is before anything is linked."""
        raw = self._r.get(self._keys.link_code(normalize_code(code)))
        if raw is None:
            return INVALID_CODE
        asked = json.loads(as_str(raw))
        asker, name = str(asked["user"]), str(asked.get("name") or "")
        if asker == msg.sender_key:
            return ("That code was made for this account: send it from your DM on the "
                    "other channel. Nothing was linked.")
        named = f"{asker} ({name})" if name else asker
        return (f"This would join your account here ({msg.sender_key}) with {named} as one "
                f"person: whoever uses {asker} will read what you tell me in either DM. "
                f"Only if that account is yours, send /link {normalize_code(code)} confirm")

    def redeem(self, code: str, msg: Inbound) -> LinkOutcome:
        """Link the sender with the account that asked for ``code``. The code is spent
        by this call whatever the outcome; a wrong one changes nothing."""
        raw = self._r.getdel(self._keys.link_code(normalize_code(code)))
        if raw is None:
            return LinkOutcome(False, INVALID_CODE)
        asker = str(json.loads(as_str(raw))["user"])
        self._r.delete(self._keys.link_pending(asker))
        me = msg.sender_key
        if asker == me:
            return LinkOutcome(False, "That code was made for this account: send it from "
                                      "your DM on the other channel. Nothing was linked; "
                                      "the code is used up.")
        mine, theirs = self.person_of(me), self.person_of(asker)
        if mine is not None and theirs is not None:
            if mine == theirs:
                return LinkOutcome(True, f"Already linked: {asker} and {me} are one person.",
                                   mine)
            return LinkOutcome(False, "These accounts already belong to two different "
                                      "people; nothing was linked. The operator can join "
                                      "them in [identities] of the config.")
        person = mine or theirs or f"{LINKED_PREFIX}{secrets.token_hex(6)}"
        new = {u: person for u in (me, asker) if self._settings.person_of(u) is None}
        self._r.hset(self._keys.identity_links, mapping=new)  # type: ignore[arg-type]
        return LinkOutcome(True, f"Linked: {asker} and {me} now share one personal memory.",
                           person)

    def _chat_links(self, person: str) -> list[str]:
        """The accounts joined to ``person`` by ``/link`` (never the config's)."""
        links = self._r.hgetall(self._keys.identity_links)
        return sorted(u for u, p in ((as_str(u), as_str(p)) for u, p in links.items())
                      if p == person and self._settings.person_of(u) is None)

    def unlink_preview(self, msg: Inbound) -> str:
        """What ``/link off confirm`` would do, changing nothing."""
        person = self.person_of(msg.sender_key)
        chat = self._chat_links(person) if person else []
        if person is None or not chat:
            return self._nothing_to_unlink(person)
        return (f"This would undo the /link links of person {person} ({', '.join(chat)}): "
                "each of those accounts gets its own DM memory again. What you told me while "
                "linked stays in that person's memory, which no DM reads any more (linking "
                "again starts a new one): /forget it first if it should go. To unlink, "
                "send /link off confirm")

    def unlink(self, msg: Inbound) -> LinkOutcome:
        """Undo every ``/link`` link of the sender's person, from any of its accounts: a
        link made by mistake (or by someone who had the other phone) must be undone from
        either side, and the joint memory then belongs to nobody's DM. The config's
        ``[identities]`` stay; only the operator changes those."""
        person = self.person_of(msg.sender_key)
        chat = self._chat_links(person) if person else []
        if person is None or not chat:
            return LinkOutcome(False, self._nothing_to_unlink(person), person)
        with self._r.pipeline(transaction=True) as pipe:
            pipe.hdel(self._keys.identity_links, *chat)
            if person not in self._settings.identities:
                pipe.hdel(self._keys.identity_share, person)  # nobody left to share it
            pipe.execute()
        return LinkOutcome(True, f"Unlinked: {', '.join(chat)} each have their own DM "
                                 f"memory again; person {person}'s memory is read by no "
                                 "DM linked in chat.", person)

    def _nothing_to_unlink(self, person: str | None) -> str:
        if person is None:
            return "This account is not linked to any other: nothing to unlink."
        return (f"Your accounts are joined by the operator's config ([identities.{person}]), "
                "not by /link: only the operator can change that. Nothing was unlinked.")

    def set_share_profile(self, person: str, on: bool) -> None:
        if on:
            self._r.hset(self._keys.identity_share, person, SHARE_PROFILE)
        else:
            self._r.hdel(self._keys.identity_share, person)

"""Tool calls waiting for an admin's approval (``[tools] approve``): their records in
Redis and the one-way moves between states.

A worker whose model calls a tool marked ``approve`` records the call here instead of
running it (``request``); an admin's ``/approve <id>`` or ``/deny <id>`` decides it
(``decide``, the gateway); the approved call runs in a new turn of the same group, whose
worker claims it (``claim_run``) and stores its result (``finish_run``); the tool host
runs an approve-marked tool only for a call whose approval is being run with exactly the
recorded tool and arguments (``authorize``). Nobody can change a record's tool or
arguments after it was made. Undecided past its deadline, the gateway's loop expires it
(``expire_due``) and tells the chat once.

Why Redis rather than a file in the group dir: the gateway (a command) and a worker both
move a record, and each move must happen at most once across processes (two admins
approving at once run it once), which a WATCH transaction gives; the key's TTL bounds
what is kept. The audit trail is the approval turn itself: its message ("X approved
<tool> <args>") and the answer are written to the group's episode like every turn.

A redaction (a message deleted on its platform, ``/forget``) takes its words out of the
records of its chat (``redact``, ``workers.redisscrub``; found by the chat's index,
``chat_key``): their arguments and result.
A call not yet run whose arguments held them is withdrawn: it would otherwise run with
arguments other than those the admin was shown, or with the words.

States::

    pending --/approve--> approved --claim (the approval turn)--> running --> done
       |--/deny--> denied      |
       |--deadline passed--> expired (the chat is told once)
       '--------------------------'--its arguments redacted--> withdrawn
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import redis

from gateway.queue.events import as_str
from gateway.queue.keys import Keys

#: sender id prefix of the message that runs an approved call (``approval:<id>``)
APPROVAL_SENDER_PREFIX = "approval:"
#: seconds a decided record is kept after its deadline, for ``/approve`` to say what
#: became of it rather than "unknown"
KEEP_AFTER = 86_400
#: the state of a call whose arguments a redaction changed before it ran
WITHDRAWN = "withdrawn"
#: what a redaction makes of a record: its new arguments and result
Scrub = Callable[["Approval"], tuple[dict[str, Any], str]]


def approval_key(keys: Keys, approval_id: str) -> str:
    return f"{keys.prefix}approval:{approval_id}"


def due_key(keys: Keys) -> str:
    """Sorted set: pending approvals by deadline (the gateway expires them)."""
    return f"{keys.prefix}approvals:due"


def chat_key(keys: Keys, group: str) -> str:
    """Set: the ids of one chat's records, so a redaction finds them without reading
    every key; it lives as long as the chat's newest record."""
    return f"{keys.prefix}approvals:of:{group}"


def canonical_args(args: dict[str, Any]) -> str:
    """The arguments as shown to the admin and compared by the tool host."""
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Approval:
    """One recorded call and what became of it."""

    id: str
    group: str
    tool: str
    args: dict[str, Any]
    #: who asked (the sender the turn answered), and the turn whose model made the call
    asked_by: str
    turn_id: str
    created: float
    expires: float
    #: where to tell the chat (the approval turn and the expiry notice go there)
    channel: str
    account: str
    chat_id: str
    thread_id: str | None
    is_group: bool
    state: str = "pending"
    decided_by: str = ""
    #: the turn that ran it, and its result (``ToolResult`` JSON) once done
    ran_turn: str = ""
    result: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Approval:
        return cls(**json.loads(raw))

    def describe(self) -> str:
        return f"{self.tool} {canonical_args(self.args)}"


def approval_id(group: str, turn_id: str, tool: str, args: dict[str, Any]) -> str:
    """Stable for one call of one turn (a retried turn records the same approval), and
    short enough to type."""
    digest = hashlib.sha256("\x1f".join([group, turn_id, tool, canonical_args(args)])
                            .encode()).hexdigest()
    return digest[:10]


class ApprovalStore:
    """The records on a sync client (the gateway calls it in a thread)."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()

    def get(self, aid: str) -> Approval | None:
        raw = self.r.get(approval_key(self.keys, aid))
        return None if raw is None else Approval.from_json(raw)  # type: ignore[arg-type]

    def request(self, approval: Approval) -> Approval:
        """Record ``approval`` (pending) unless it is there already (a retried turn):
        the record kept is returned, whatever state it reached."""
        key = approval_key(self.keys, approval.id)
        ttl = max(int(approval.expires - time.time()), 1) + KEEP_AFTER
        if self.r.set(key, approval.to_json(), nx=True, ex=ttl):
            index = chat_key(self.keys, approval.group)
            left = int(self.r.ttl(index))  # type: ignore[arg-type]
            with self.r.pipeline(transaction=True) as pipe:
                pipe.zadd(due_key(self.keys), {approval.id: approval.expires})
                pipe.sadd(index, approval.id)
                # one chat's calls are recorded by its turns, one at a time: no race
                pipe.expire(index, max(ttl, left))
                pipe.execute()
            return approval
        return self.get(approval.id) or approval

    def _move(self, aid: str, change: Any) -> tuple[Approval | None, str | None]:
        """Apply ``change(approval) -> (new approval | None, refusal | None)`` atomically
        (WATCH: a concurrent move makes this one start over)."""
        key = approval_key(self.keys, aid)
        out: list[tuple[Approval | None, str | None]] = []

        def attempt(pipe: Any) -> None:
            out.clear()
            raw = pipe.get(key)
            current = None if raw is None else Approval.from_json(raw)
            new, refusal = change(current)
            pipe.multi()
            if new is not None and new != current:
                pipe.set(key, new.to_json(), keepttl=True)
                if new.state != "pending":
                    pipe.zrem(due_key(self.keys), aid)
            out.append((new or current, refusal))

        self.r.transaction(attempt, key)
        return out[0]

    def decide(self, aid: str, group: str, *, approve: bool, by: str,
               now: float | None = None) -> tuple[Approval | None, str | None]:
        """``/approve`` (``approve``) or ``/deny`` by ``by`` in ``group``: the record and
        None when it moved, else the refusal for the chat."""
        at = time.time() if now is None else now
        verb = "approve" if approve else "deny"

        def change(a: Approval | None) -> tuple[Approval | None, str | None]:
            if a is None or a.group != group:
                return None, f"There is no approval {aid} waiting in this chat."
            if a.state == "pending" and a.expires <= at:
                return (replace(a, state="expired"),
                        f"Approval {aid} expired before it was decided: {a.describe()} "
                        "did not run.")
            if a.state != "pending":
                who = f" by {a.decided_by}" if a.decided_by else ""
                return a, f"Approval {aid} was already {_past(a.state)}{who}; cannot {verb} it."
            return replace(a, state="approved" if approve else "denied", decided_by=by), None

        return self._move(aid, change)

    def claim_run(self, aid: str, group: str, turn_id: str
                  ) -> tuple[Approval | None, str | None]:
        """The approval turn ``turn_id`` takes the approved call to run it. A retry of
        that turn gets the record back with its result if the call finished, else a
        refusal (never a second run)."""
        def change(a: Approval | None) -> tuple[Approval | None, str | None]:
            if a is None or a.group != group:
                return None, f"approval {aid} is unknown here"
            if a.state == "done" and a.ran_turn == turn_id:
                return a, None
            if a.state == "running" and a.ran_turn == turn_id:
                # an earlier attempt of this turn died while the call ran: its effect is
                # unknown, and an approved call never runs twice
                return a, (f"approval {aid}: an earlier attempt of this turn stopped "
                           "while the call ran; its outcome is unknown and it is not "
                           "run again")
            if a.state != "approved":
                return a, f"approval {aid} is {a.state}, not approved"
            return replace(a, state="running", ran_turn=turn_id), None

        return self._move(aid, change)

    def finish_run(self, aid: str, result: str) -> None:
        """Keep the call's result (a ``ToolResult`` JSON): a retried turn shows it again
        rather than running the call twice."""
        self._move(aid, lambda a: (None if a is None else
                                   replace(a, state="done", result=result), None))

    def authorize(self, aid: str, group: str, tool: str, args: dict[str, Any]) -> str | None:
        """For the tool host: None when ``tool(args)`` in ``group`` is the call of an
        approval being run now, else why not."""
        if not aid:
            return f"refused: {tool} needs an admin's approval in the chat"
        a = self.get(aid)
        if a is None or a.group != group or a.state != "running":
            return f"refused: approval {aid} is not being run in this chat"
        if a.tool != tool or canonical_args(a.args) != canonical_args(args):
            return f"refused: the call differs from what approval {aid} approved"
        return None

    def ids(self, group: str) -> list[str]:
        """The ids of ``group``'s records (some may have expired)."""
        return sorted(as_str(x) for x in self.r.smembers(chat_key(self.keys, group)))

    def redact(self, group: str, scrub: Scrub) -> int:
        """Give each record of ``group`` (only) the arguments and result ``scrub`` makes
        of it, atomically with the moves (WATCH: a ``/approve`` in between makes it start
        over on the decided record, so no decision is lost or undone). A call not run yet
        whose arguments changed is withdrawn. Returns the records changed."""
        ids = self.ids(group)
        raws: Any = self.r.mget([approval_key(self.keys, aid) for aid in ids]) if ids else []
        if gone := [aid for aid, raw in zip(ids, raws, strict=True) if raw is None]:
            self.r.srem(chat_key(self.keys, group), *gone)  # expired records
        changed = 0
        for aid, raw in zip(ids, raws, strict=True):
            try:
                seen = None if raw is None else Approval.from_json(raw)
            except (ValueError, TypeError):  # not a record this release reads: left alone
                continue
            if seen is None or seen.group != group or _scrubbed(seen, scrub) is None:
                continue  # gone, not the chat's, or without the words: not rewritten

            def change(a: Approval | None) -> tuple[Approval | None, str | None]:
                new = None if a is None or a.group != group else _scrubbed(a, scrub)
                return new, None if new is not None else "unchanged"

            changed += self._move(aid, change)[1] is None
        return changed

    def expire_due(self, now: float | None = None, limit: int = 100) -> list[Approval]:
        """Expire the pending approvals past their deadline; the ones this call expired
        (each exactly once, however many gateways run)."""
        at = time.time() if now is None else now
        expired: list[Approval] = []
        for raw in self.r.zrangebyscore(due_key(self.keys), "-inf", at, start=0, num=limit):
            aid = as_str(raw)

            def change(a: Approval | None) -> tuple[Approval | None, str | None]:
                if a is None or a.state != "pending":
                    return None, "gone"
                return replace(a, state="expired"), None

            moved, gone = self._move(aid, change)
            if gone is None and moved is not None:
                expired.append(moved)
            else:  # decided meanwhile, or its record outlived: no longer due
                self.r.zrem(due_key(self.keys), aid)
        return expired


def _scrubbed(a: Approval, scrub: Scrub) -> Approval | None:
    """``a`` as ``scrub`` makes it, withdrawn if its arguments changed before it ran;
    None when nothing changed."""
    args, result = scrub(a)
    if args == a.args and result == a.result:
        return None
    ran = a.state not in ("pending", "approved")
    return replace(a, args=args, result=result,
                   state=a.state if ran or args == a.args else WITHDRAWN)


def _past(state: str) -> str:
    return {"approved": "approved", "running": "approved", "done": "approved and run",
            "denied": "denied", "expired": "expired",
            WITHDRAWN: "withdrawn (a deletion or /forget took words out of its arguments)",
            }.get(state, state)

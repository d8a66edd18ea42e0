"""Edits and deletions of earlier messages (``Inbound.kind`` edit / deletion).

They never start a turn. An edit of a message still waiting for its turn (in the
group's mailbox or context list) replaces that entry's text, so the turn sees the words
as they are now; a deletion removes the entry. A change to a message a turn already
took (or one never seen, e.g. sent before the bot joined) is appended to
``changes:{group}`` for the memory layer: a recorded deletion or edit makes the inbox
enqueue the redaction job (``workers/redaction.py``), which takes the message's words
out of memory and Redis (an edit: puts the author's new words in their place; an edit
by anyone else is dropped) and removes the record.

The decision is atomic (``gateway/queue/lua/amend.lua``): Python finds the waiting
entry and builds its replacement, the script swaps it only if that exact entry is still
waiting. If it is not (a turn took it, or another edit replaced it meanwhile) Python
reads again, and a change whose message is no longer waiting is recorded: never lost.

Only the author's edit replaces a message (platforms let nobody else edit, and this
keeps a forged edit event from rewriting someone else's words); a deletion may come from
a moderator, and Slack does not always say who deleted.
"""

from __future__ import annotations

import json
import logging

from channels.models import Inbound
from gateway.queue import DUPLICATE, Entry, GatewayQueue, encode_entry, parse_entry

log = logging.getLogger(__name__)

#: most recorded changes kept per group until the memory layer consumes them
CHANGES_CAP = 1000
#: ``amend`` result: the entry read changed before the script ran (read again)
AMEND_STALE = 2
#: reads before a change whose entry keeps changing underneath is recorded instead
READ_ATTEMPTS = 3


def find_waiting(raw_entries: list[str], change: Inbound) -> Entry | None:
    """The waiting entry ``change`` refers to, if any."""
    for raw in raw_entries:
        try:
            entry = parse_entry(raw)
        except ValueError:
            continue
        msg = entry.msg
        if str(msg.get("message_id")) != change.original_id or \
                msg.get("account", "default") != change.account:
            continue
        if change.kind == "edit" and str(msg.get("sender_id")) != change.sender_id:
            log.warning("edit of %s in %s by %s, not its author: recorded only",
                        change.original_id, change.group, change.sender_id)
            return None
        return entry
    return None


def replacement(entry: Entry, change: Inbound) -> str | None:
    """The entry as it must be after ``change``: None for a deletion."""
    if change.kind == "deletion":
        return None
    edited = Inbound.model_validate(entry.msg).model_copy(update={"text": change.text})
    return f"{entry.seq} {encode_entry(edited.model_dump_json(), entry.engaged)}"


def change_record(change: Inbound) -> str:
    """What ``changes:{group}`` keeps: enough for the memory layer to find the episode
    (channel, chat, original id) and apply it (the new text of an edit)."""
    record = {"kind": change.kind, "channel": change.channel, "account": change.account,
              "chat_id": change.chat_id, "original_id": change.original_id,
              "event_id": change.message_id, "sender_id": change.sender_id,
              "sender_name": change.sender_name, "is_group": change.is_group,
              "at": change.received_at.isoformat()}
    if change.kind == "edit":
        record["text"] = change.text
    return json.dumps(record, separators=(",", ":"))


async def apply_change(q: GatewayQueue, change: Inbound, group: str, *, dedupe_ttl: int
                       ) -> str:
    """Apply ``change`` to the group's waiting messages or record it. Returns
    ``edited`` / ``deleted`` (a waiting message changed), ``recorded`` or ``duplicate``.
    Raises ``redis.RedisError`` when it could not be made durable."""
    result = AMEND_STALE
    for attempt in range(READ_ATTEMPTS):
        entry = find_waiting(await q.waiting(group), change)
        new = replacement(entry, change) if entry is not None else None
        result = await q.amend(group, change.dedupe_id, entry.raw if entry else None, new,
                               change_record(change), dedupe_ttl=dedupe_ttl, cap=CHANGES_CAP,
                               final=entry is None or attempt == READ_ATTEMPTS - 1)
        if result != AMEND_STALE:
            break
    if result == DUPLICATE:
        return "duplicate"
    if result == 1:
        return "edited" if change.kind == "edit" else "deleted"
    log.info("%s of %s in %s recorded for memory (no longer waiting)", change.kind,
             change.original_id, group)
    return "recorded"

"""A model's call of a tool marked ``approve``: recorded, not run.

The call (tool, arguments exactly as the model gave them, who asked, the turn) becomes a
pending approval in Redis (``gateway.queue.approvals``); the model is told it waits, and
the turn's reply names the call and how to approve it (``notice``), whatever the model
writes. The worker is never blocked: an admin's ``/approve <id>`` runs it in a new turn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from channels.models import Inbound
from gateway.queue import Keys
from gateway.queue.approvals import Approval, ApprovalStore, approval_id
from workers.prompt import anchor_of


def notice(a: Approval) -> str:
    """What the chat is told about a waiting call: the call as it will run, and how."""
    minutes = max(1, round((a.expires - a.created) / 60))
    return (f"Waiting for approval {a.id}: {a.describe()}\n"
            f"An admin can send /approve {a.id} to run it exactly so, or /deny {a.id}; "
            f"undecided, it is refused in {minutes} min.")


def request_approval(client: redis.Redis, keys: Keys, *, group: str, turn_id: str,
                     messages: Sequence[Inbound], tool: str, args: dict[str, Any],
                     timeout: float) -> Approval:
    """Record the call as pending (once per turn and call: a retried turn finds it)."""
    asker = anchor_of(messages)  # the message the turn answers: its sender asked
    now = time.time()
    return ApprovalStore(client, keys).request(Approval(
        id=approval_id(group, turn_id, tool, args), group=group, tool=tool, args=args,
        asked_by=asker.sender_key, turn_id=turn_id, created=now, expires=now + timeout,
        channel=asker.channel, account=asker.account, chat_id=asker.chat_id,
        thread_id=asker.thread_id, is_group=asker.is_group))


def waiting_text(a: Approval) -> str:
    """What the tool returns to the model: a retried turn may find its call decided
    already (then the chat is not asked again)."""
    if a.state != "pending":
        return (f"approval {a.id} of this {a.tool} call was {a.state} already; it is not "
                "asked again from this turn.")
    return (f"waiting for approval {a.id}: {a.tool} did not run. An admin must send "
            f"/approve {a.id} in this chat; the chat is told how. Do not call it again.")

"""``/approve <id>`` and ``/deny <id>`` on the gateway's side, and the expiry of calls
nobody decided.

An approval moves once (``gateway.queue.approvals``): an approved one becomes a message
from "approval <id>" pushed into its group's mailbox the way a scheduled run is
(``gateway.tasks.push_run``: deduped by its id, in the group's order, the drain job
ensured), and the worker that takes it runs exactly the recorded call
(``workers.approval_runs``). A call past its deadline is refused and its chat told once
(the notice's reply id names the approval, and only the loop that expired it sends it).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import redis

from channels.models import Inbound, Outbound
from gateway import wait_any
from gateway.config import Settings
from gateway.queue import GatewayQueue
from gateway.queue.approvals import APPROVAL_SENDER_PREFIX, Approval, ApprovalStore
from gateway.queue.tasks import publish_notice
from gateway.tasks import push_run

if TYPE_CHECKING:  # not at run time: gateway.intake._inbox builds this desk
    from gateway.intake._inbox import DrainEnqueuer

log = logging.getLogger(__name__)

#: seconds between two looks for expired approvals
EXPIRE_EVERY = 1.0
USAGE = "Usage: /{verb} <id>, the id of a call waiting for approval in this chat."


def approval_message(a: Approval, by: str) -> Inbound:
    """The message that runs an approved call in its group, as a new turn."""
    return Inbound(channel=a.channel, account=a.account, chat_id=a.chat_id,
                   thread_id=a.thread_id, is_group=a.is_group,
                   sender_id=f"{APPROVAL_SENDER_PREFIX}{a.id}", sender_name=f"approval {a.id}",
                   message_id=f"approval-{a.id}",
                   text=f"{by} approved the call {a.describe()} (approval {a.id}); it ran.",
                   mentions_bot=True, received_at=datetime.now(UTC))


def expired_notice(a: Approval) -> Outbound:
    return Outbound(channel=a.channel, account=a.account, chat_id=a.chat_id,
                    thread_id=a.thread_id, reply_id=f"approval-{a.id}-expired",
                    text=f"Approval {a.id} expired: {a.describe()} did not run.")


class ApprovalDesk:
    """Decides approvals for the command layer; expires the undecided ones."""

    def __init__(self, config: Settings, client: redis.Redis, q: GatewayQueue,
                 enqueuer: DrainEnqueuer) -> None:
        self._cfg = config
        self._q = q
        self._enqueuer = enqueuer
        self.store = ApprovalStore(client, q.keys)

    async def decide(self, msg: Inbound, args: str, *, approve: bool) -> str:
        verb = "approve" if approve else "deny"
        words = args.split()
        if len(words) != 1:
            return USAGE.format(verb=verb)
        aid = words[0].lower()
        by = f"{msg.sender_name} ({msg.sender_key})"
        approval, refusal = await asyncio.to_thread(self.store.decide, aid, msg.group,
                                                    approve=approve, by=by)
        if refusal is not None or approval is None:
            return refusal or f"There is no approval {aid} waiting in this chat."
        log.info("approval %s in %s: %sd by %s", aid, msg.group, verb, msg.sender_key)
        if not approve:
            return f"Denied {aid}: {approval.describe()} will not run."
        await push_run(self._q, self._enqueuer, self._cfg, approval_message(approval, by))
        return f"Approved {aid}: running {approval.describe()} now."

    def expire(self) -> list[Approval]:
        """Expire what is past its deadline and tell each chat (blocking)."""
        expired = self.store.expire_due()
        for a in expired:
            publish_notice(self.store.r, self.store.keys, expired_notice(a))
            log.info("approval %s in %s expired undecided", a.id, a.group)
        return expired

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.expire)
            except (redis.RedisError, OSError) as err:
                log.warning("approvals: Redis: %s", err)
            await wait_any(EXPIRE_EVERY, stop)

"""What a scheduled run puts in its chat's mailbox, and how.

A run is a message from "scheduled task <name>" (sender ``task:<id>``) with the task's
text, pushed by the same ``push.lua`` as every inbound message: deduped by its id
(``task-<id>-<due ms>``: a run claimed twice is pushed once), appended to the group's
mailbox in arrival order, and the group's one drain job ensured. The group's lock and
order therefore hold for it like for any message. It skips the front desk and the
router on purpose: a task's text is never a chat command (a "/forget ... confirm" in a
DM task would run as the DM's owner), and a task always addresses the bot, whatever the
group's engage rule. Its sender is a member at most (``workers.prompt.role_of``).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from channels.models import Inbound
from gateway.config import Settings
from gateway.queue import DUPLICATE, KEPT_ENQUEUE, GatewayQueue, encode_entry
from gateway.queue.tasks import TASK_SENDER_PREFIX
from memory_store.tasks import Task

if TYPE_CHECKING:  # not at run time: gateway.intake._inbox imports the commands, which use this
    from gateway.intake._inbox import DrainEnqueuer


#: how long a run's id is remembered against a second push, seconds: a run is pushed
#: again only by a scheduler that re-claims it after a dead holder's lease (a minute),
#: and an every-5-minutes task would otherwise keep 2,000 ids a week in Redis
RUN_DEDUPE_TTL = 3600


def run_message(task: Task, due: datetime) -> Inbound:
    """The message one run of ``task`` (due at ``due``) sends to its chat."""
    return Inbound(channel=task.channel, account=task.account, chat_id=task.chat_id,
                   thread_id=task.thread_id, is_group=task.is_group,
                   sender_id=f"{TASK_SENDER_PREFIX}{task.id}",
                   sender_name=f"scheduled task {task.name}",
                   message_id=f"task-{task.id}-{int(due.timestamp() * 1000)}",
                   text=task.text, mentions_bot=True, received_at=datetime.now(UTC))


async def push_run(q: GatewayQueue, enqueuer: DrainEnqueuer, config: Settings,
                   msg: Inbound) -> bool:
    """Make the run durable in its group's mailbox; False when it was there already."""
    job_id = uuid.uuid4().hex
    result = await q.push(msg.group, msg.dedupe_id, encode_entry(msg.model_dump_json(), True),
                          engaged=True,
                          dedupe_ttl=min(config.queue.dedupe_ttl, RUN_DEDUPE_TTL),
                          lease_ttl_ms=int(config.queue.lease_ttl * 1000), job_id=job_id)
    if result == KEPT_ENQUEUE:
        # the lease is ours; if this enqueue fails the sweeper enqueues after it expires
        await enqueuer.aenqueue(msg.group, job_id)
    return result != DUPLICATE

"""A task whose creator the chat's policy no longer lets in is paused, and the chat told.

Checked by the scheduler before each run, from the configuration alone (``Router.allowed``
for a message from the creator in the task's chat): a DM's owner taken off ``[policy]
allow``, a group taken off it. A DM under ``pairing`` is not re-checked here (the pairing
store is the inbox's; an approval withdrawn there still lets the task run until a chat
admin or the operator cancels it). Leaving a group is not seen either: the adapters do
not read membership events yet.
"""

from __future__ import annotations

import logging

import redis

from channels.models import Inbound, Outbound
from gateway.config import Settings
from gateway.intake._router import Router
from gateway.queue import Keys
from gateway.queue.tasks import notice_id, publish_notice
from memory_store.tasks import Task, TaskStore

log = logging.getLogger(__name__)

NOTICE = ("I paused the scheduled task \"{name}\": the person who created it is no longer "
          "allowed here. /tasks cancel {id} removes it.")


def creator_allowed(config: Settings, task: Task) -> bool:
    channel, _, sender = task.creator.partition(":")
    if channel != task.channel or not sender:
        return False  # a creator from another channel: a hand-edited file
    msg = Inbound(channel=task.channel, account=task.account, chat_id=task.chat_id,
                  is_group=task.is_group, sender_id=sender, sender_name=sender,
                  message_id="task-creator-check", text="")
    paired = not task.is_group and config.policy.dm == "pairing"
    return Router(config).allowed(msg, paired=paired)


def pause_for_creator(client: redis.Redis, keys: Keys, store: TaskStore, task: Task) -> None:
    """Pause ``task`` (once: only an active task gets here) and tell its chat."""
    store.update(task.id, actor="scheduler", state="paused",
                 why="its creator is no longer allowed here")
    store.log_run(task.id, "paused", detail="its creator is no longer allowed here")
    publish_notice(client, keys, Outbound(
        channel=task.channel, account=task.account, chat_id=task.chat_id,
        thread_id=task.thread_id, text=NOTICE.format(name=task.name, id=task.id),
        reply_id=notice_id(task.group, task.id, "creator", task.updated.timestamp())))
    log.warning("task %s in %s paused: its creator is no longer allowed", task.id, task.group)

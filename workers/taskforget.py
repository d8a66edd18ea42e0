"""``/forget`` and platform deletions reach scheduled tasks: a task whose name or text
holds the forgotten or deleted words is removed (its file deleted, audited without the
words), and its chat told once, without the words. Called by the redaction job
(``workers.redaction``) under the group's lock, with the same matcher it uses for memory.
"""

from __future__ import annotations

import logging

import redis

from channels.models import Outbound
from gateway.config import Settings
from gateway.queue import Keys
from gateway.queue.tasks import TaskTimes, notice_id, publish_notice
from memory_store import GroupDirectory
from memory_store.maintenance import WordFinder
from memory_store.tasks import TaskStore

log = logging.getLogger(__name__)

REMOVED_NOTICE = ("I removed the scheduled task \"{name}\": it held words that were "
                  "deleted or forgotten.")
REMOVED_UNNAMED = "I removed a scheduled task: it held words that were deleted or forgotten."


def forget_tasks(client: redis.Redis, keys: Keys, settings: Settings, group: str,
                 pat: WordFinder) -> int:
    """Remove ``group``'s tasks whose words ``pat`` finds; returns how many."""
    store = TaskStore(GroupDirectory(settings.data_dir, group))
    removed = 0
    for task in store.all():
        if not (pat.search(task.text) or pat.search(task.name)):
            continue
        store.delete(task.id, actor="redaction", why="its words were deleted or forgotten")
        TaskTimes(client, keys).unschedule(group, task.id)
        # the name may hold the words too: the notice then does not name it
        text = (REMOVED_NOTICE.format(name=task.name) if not pat.search(task.name)
                else REMOVED_UNNAMED)
        publish_notice(client, keys, Outbound(
            channel=task.channel, account=task.account, chat_id=task.chat_id,
            thread_id=task.thread_id, text=text,
            reply_id=notice_id(task.group, task.id, "forgotten", task.created.timestamp()),
        ))
        log.info("redaction in %s removed a scheduled task", group)
        removed += 1
    return removed

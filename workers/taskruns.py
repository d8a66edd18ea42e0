"""What became of a scheduled task's run, in its run log; a task that keeps failing is
paused and its chat told once.

Called by the drain job after each turn with the turn's outcome: "published" or
"replayed" is a run that worked (its failure count starts over), "dead" one that failed
for good (after the queue's retries), "parked" one a spent budget stopped: logged as
skipped, not counted as a failure (the run waits in the mailbox and is answered when a
cap changes). At ``[tasks] pause_after`` failures in a row the task is paused and the
chat gets one notice (its reply id names the task and its failure streak, and the notice
goes out only when the task goes from active to paused).
"""

from __future__ import annotations

import logging

import redis

from channels.models import Inbound, Outbound
from gateway.config import Settings
from gateway.queue import Keys
from gateway.queue.approvals import APPROVAL_SENDER_PREFIX
from gateway.queue.tasks import TASK_SENDER_PREFIX, notice_id, publish_notice
from memory_store import GroupDirectory
from memory_store.tasks import Task, TaskStore

log = logging.getLogger(__name__)

PAUSED_NOTICE = ("I paused the scheduled task \"{name}\": its last {n} runs failed. "
                 "/tasks resume {id} runs it again.")


def replies_to(msg: Inbound) -> str | None:
    """The platform message a reply to ``msg`` quotes: none for a task's run or an
    approval's (``workers.approval_runs``), whose id exists on no platform (Telegram
    and Discord would refuse it, Slack and Matrix thread under nothing)."""
    return None if msg.sender_id.startswith((TASK_SENDER_PREFIX, APPROVAL_SENDER_PREFIX)) \
        else msg.message_id


def note_runs(client: redis.Redis, keys: Keys, settings: Settings, group: str,
              sender_ids: list[str], outcome: str) -> None:
    """Record ``outcome`` for every task run among the batch's senders."""
    tids = sorted({s[len(TASK_SENDER_PREFIX):] for s in sender_ids
                   if s.startswith(TASK_SENDER_PREFIX)})
    if not tids:
        return
    store = TaskStore(GroupDirectory(settings.data_dir, group))
    for tid in tids:
        try:
            _note(client, keys, settings, store, tid, outcome)
        except (OSError, ValueError, redis.RedisError) as err:
            log.warning("task %s in %s: could not record its run (%s)", tid, group, err)


def _note(client: redis.Redis, keys: Keys, settings: Settings, store: TaskStore,
          tid: str, outcome: str) -> None:
    if outcome == "parked":
        store.log_run(tid, "skipped", detail="the model budget is spent")
        return
    if outcome in ("published", "replayed"):
        store.log_run(tid, "ok")
        task = store.get(tid)
        if task is not None and task.failures:
            store.update(tid, actor="worker", failures=0)
        return
    if outcome != "dead":
        return
    limit = settings.tasks.pause_after
    with store.gd.lock():
        task = store.get(tid)
        if task is None:
            return
        failures = task.failures + 1
        pause = task.state == "active" and failures >= limit
        store.save(task.with_(failures=failures, **(
            {"state": "paused", "why": f"{failures} failed runs in a row"} if pause else {})),
            actor="worker")
    store.log_run(tid, "failed", detail=f"{failures} in a row")
    if pause:
        store.log_run(tid, "paused", detail=f"after {failures} failed runs; chat told")
        _tell(client, keys, task, failures)


def _tell(client: redis.Redis, keys: Keys, task: Task, failures: int) -> None:
    notice = Outbound(channel=task.channel, account=task.account, chat_id=task.chat_id,
                      thread_id=task.thread_id,
                      text=PAUSED_NOTICE.format(name=task.name, n=failures, id=task.id),
                      reply_id=notice_id(task.group, task.id, "paused",
                                         task.updated.timestamp()))
    publish_notice(client, keys, notice)
    log.warning("task %s in %s paused after %d failed runs", task.id, task.group, failures)

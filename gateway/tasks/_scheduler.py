"""The scheduler loop: due runs out of Redis, into their chats' mailboxes.

It runs in the gateway, under the gateway's task supervisor (``Gateway._spawn``: a loop
that dies is started again), because the gateway is what is always on and what already
owns the intake (``push.lua``) and the sweeper; workers come and go with the load, and a
worker's job can be stuck behind a long turn. Several gateways may run it at once:
``task_claim.lua`` gives each due run to one of them.

Each tick claims the due members (``gateway.queue.tasks``), reads each task's file
(the truth: a task paused, cancelled or edited by hand since is seen here), decides
which runs to fire by its catch-up policy, pushes them, logs them in the task's run
log, and releases the member with the next fire time. Runs later than ``[tasks] grace``
are missed: ``skip`` fires none of them, ``once`` the newest, ``all`` up to
``[tasks] catchup_max``; the rest are logged as missed. Every ``[tasks] rescan``
seconds (and at start) it reads every group's ``tasks/`` and gives each active task
without a time its next one (after the run log's last fired run): new tasks, resumed
ones, and all of them after Redis lost its data.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import redis
import redis.asyncio as aioredis

from channels.models import Inbound
from gateway import wait_any
from gateway.config import Settings
from gateway.intake._groupfiles import GroupFiles
from gateway.queue import GatewayQueue, Keys
from gateway.queue.tasks import TaskTimes
from gateway.tasks._creator import creator_allowed, pause_for_creator
from gateway.tasks._fire import push_run, run_message
from memory_store.tasks import Task, TaskStore, due_times, next_run

if TYPE_CHECKING:  # not at run time: gateway.intake._inbox imports the commands, which use this
    from gateway.intake._inbox import DrainEnqueuer

log = logging.getLogger(__name__)

#: how long a claim holds before another scheduler may take the run, seconds
CLAIM_LEASE = 60.0


@dataclass
class Plan:
    """What one claimed member comes to."""

    group: str
    task_id: str
    fire: list[Inbound] = field(default_factory=list)
    next_at: float | None = None
    #: the task will not run again (a one-off that ran or was missed)
    done: bool = False


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class Scheduler:
    def __init__(self, config: Settings, sync: redis.Redis, client: aioredis.Redis,
                 enqueuer: DrainEnqueuer, keys: Keys | None = None) -> None:
        self._cfg = config
        self._files = GroupFiles.of(config)
        self._keys = keys or Keys()
        self.times = TaskTimes(sync, self._keys)
        self._q = GatewayQueue(client, self._keys)
        self._enqueuer = enqueuer
        self._rescanned = float("-inf")

    def rescan(self) -> int:
        """Give every active task without a fire time its next one (from the files);
        returns how many were added."""
        added = 0
        for gd in self._files.groups_with_tasks():
            store = TaskStore(gd)
            for task in store.all():
                if task.state != "active":
                    continue
                when = next_run(task, store.last_fired(task.id))
                if when is not None and self.times.schedule(task.group, task.id,
                                                            when.timestamp(), only_new=True):
                    added += 1
        return added

    def plan(self, group: str, tid: str, due: float, now: float) -> Plan:
        """Which runs of a claimed member fire now; logs them; the member's next time."""
        out = Plan(group, tid)
        try:
            store = self._files.tasks(group)
        except ValueError:
            log.warning("scheduler: invalid group key %r in the task set; dropped", group)
            return out
        task = store.get(tid)
        if task is None or task.state != "active":
            return out  # cancelled or paused since: no time until it is resumed
        if not creator_allowed(self._cfg, task):
            pause_for_creator(self.times.r, self._keys, store, task)
            return out
        cfg = self._cfg.tasks
        now_dt = _utc(now)
        dues, total = due_times(task, _utc(due), now_dt, cfg.catchup_max)
        on_time = [d for d in dues if (now_dt - d).total_seconds() <= cfg.grace]
        fire = self._pick(task, dues, on_time)
        if total > len(fire):
            store.log_run(tid, "missed", detail=f"{total - len(fire)} run(s) missed while "
                          f"stopped (catch-up {task.catchup})", count=total - len(fire))
        for d in fire:
            out.fire.append(run_message(task, d))
        last = dues[-1] if dues else _utc(due)
        nxt = task.next_after(max(last, now_dt))
        out.next_at = None if nxt is None else nxt.timestamp()
        out.done = nxt is None
        return out

    def _pick(self, task: Task, dues: list[datetime], on_time: list[datetime]
              ) -> list[datetime]:
        if task.catchup == "skip":
            return on_time
        if task.catchup == "once":
            return on_time[-1:] or dues[-1:]
        return dues  # "all": already the newest ``catchup_max``

    def finish(self, plan: Plan, pushed: list[tuple[Inbound, bool]]) -> None:
        """Log what fired and release the member with its next time."""
        store = self._files.tasks(plan.group)
        for msg, new in pushed:
            due_ms = int(msg.message_id.rsplit("-", 1)[1])
            store.log_run(plan.task_id, "fired" if new else "fired-again",
                          due=_utc(due_ms / 1000), message_id=msg.message_id)
        if plan.next_at is None and plan.done:
            store.update(plan.task_id, actor="scheduler", state="done",
                         why="ran once" if plan.fire else "its time passed while stopped")
        self.times.release(plan.group, plan.task_id, plan.next_at)

    async def tick(self, now: float | None = None) -> int:
        """One pass: fire what is due; returns how many runs were pushed."""
        now = time.time() if now is None else now
        claims = await asyncio.to_thread(self.times.claim, now, CLAIM_LEASE)
        fired = 0
        for group, tid, due in claims:
            plan = await asyncio.to_thread(self.plan, group, tid, due, now)
            pushed = [(msg, await push_run(self._q, self._enqueuer, self._cfg, msg))
                      for msg in plan.fire]
            fired += sum(1 for _, new in pushed if new)
            await asyncio.to_thread(self.finish, plan, pushed)
        return fired

    async def run(self, stop: asyncio.Event) -> None:
        """Tick every ``[tasks] tick`` seconds (and rescan) until ``stop`` is set."""
        cfg = self._cfg.tasks
        while not stop.is_set():
            try:
                if time.monotonic() - self._rescanned >= cfg.rescan:
                    self._rescanned = time.monotonic()
                    await asyncio.to_thread(self.rescan)
                await self.tick()
            except (redis.RedisError, OSError) as err:
                log.warning("scheduler: Redis or the data dir unavailable (%s); retrying", err)
            except Exception:
                log.exception("scheduler: unexpected error; retrying")
            await wait_any(cfg.tick, stop)

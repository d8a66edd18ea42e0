"""The agent's task tools: ``schedule_task``, ``list_tasks``, ``pause_task``,
``cancel_task`` (the files are ``memory_store.tasks``; the gateway's scheduler fires them).

Who may create or change a task is decided from structure, never from the model:

- the turn must hold nothing below member trust: no forward, no quote, no memory or
  tool result at quoted trust (``TurnDeps.read_trust``). A prompt injection in such
  content could otherwise plant recurring work; here a fooled model that obeys it gets a
  refusal, whatever it was told;
- a task's own run never creates or changes a task (no task breeds tasks);
- the creator is the sender of the message that asked (the last engaged one), with
  that sender's role; pausing or cancelling takes the creator, a chat admin, the DM's
  owner or the operator. A task's run speaks as a member whatever its creator's role.

The schedule is checked by ``memory_store.tasks.validate`` (cron, zone, minimum interval)
and the per-group cap by the store, with errors the model can pass on. A new or changed
task is picked up by the scheduler's next rescan (``[tasks] rescan``).
"""

from __future__ import annotations

import asyncio
import logging

from pydantic_ai import RunContext, Tool

from channels.models import Inbound
from gateway.queue.tasks import TASK_SENDER_PREFIX
from memory_store import GroupDirectory
from memory_store.tasks import TaskError, TaskSpec, TaskStore, Where, task_id, validate
from workers.prompt import TRUSTED_ROLES, content_trust, engaged_ids, role_of
from workers.tools import MEMBER_TRUST, TurnDeps

log = logging.getLogger(__name__)


def _asker(deps: TurnDeps) -> Inbound | None:
    engaged = engaged_ids(deps.messages, deps.engaged)
    asked = [m for m in deps.messages if m.message_id in engaged]
    return asked[-1] if asked else None


def tainted(deps: TurnDeps) -> str | None:
    """Why this turn may not create or change a task, or None when it may."""
    if any(m.sender_id.startswith(TASK_SENDER_PREFIX) for m in deps.messages):
        return "a scheduled task's run cannot create or change tasks"
    if any(content_trust(m, deps.admins) < MEMBER_TRUST for m in deps.messages):
        return ("this conversation holds quoted or forwarded text; tasks are only created "
                "or changed from a message with nothing quoted in it: ask again in a new "
                "message")
    if deps.read_trust < MEMBER_TRUST:
        return ("this turn read low-trust content (tool output or stored quoted text); "
                "tasks are only created or changed from a person's own words: ask again")
    return None


def _store(deps: TurnDeps) -> TaskStore | None:
    if deps.group_dir is None or deps.tasks is None:
        return None
    return TaskStore(GroupDirectory(deps.group_dir.data_dir, deps.group))


async def schedule_task(ctx: RunContext[TurnDeps], name: str, text: str,
                        cron: str | None = None, every: str | None = None,
                        at: str | None = None, timezone: str | None = None,
                        catchup: str = "once") -> str:
    """Schedule a recurring or one-off task in this chat: at each run, ``text`` is sent
    to you as a message from "scheduled task <name>" and you answer it in this chat.
    Give exactly one of cron, every, at.

    Args:
        name: a short name, e.g. "standup-reminder".
        text: what to do at each run, e.g. "Remind everyone to post their plan".
        cron: a 5-field cron expression on the local clock, e.g. "0 9 * * 1".
        every: an interval, e.g. "15m", "2h", "1d" or seconds.
        at: run once at this local date and time, e.g. "2026-05-01T09:00".
        timezone: an IANA zone such as "Europe/Paris" (default: this chat's).
        catchup: after downtime: "skip" missed runs, run "once", or "all" of them.
    """
    deps = ctx.deps
    why = tainted(deps)
    if why is not None:
        log.info("turn %s: schedule_task refused: %s", deps.turn_id, why)
        return f"Refused: {why}."
    store, asker = _store(deps), _asker(deps)
    if store is None or asker is None or deps.tasks is None:
        return "Scheduled tasks are not available in this chat."
    cfg = deps.tasks
    where = Where(group=deps.group, channel=asker.channel, chat_id=asker.chat_id,
                  is_group=asker.is_group, creator=asker.sender_key,
                  creator_role=role_of(asker, deps.admins).value, account=asker.account,
                  thread_id=asker.thread_id)
    spec = TaskSpec(name=name, text=text, cron=cron, every=every, at=at, timezone=timezone,
                    catchup=catchup)
    try:
        task = validate(spec, where, default_zone=cfg.zone_of(deps.group),
                        min_interval=cfg.min_interval, now=deps.now)
        await asyncio.to_thread(store.create, task, actor=f"agent:{deps.turn_id}",
                                cap=cfg.max_per_group)
    except TaskError as err:
        return f"Not scheduled: {err}."
    log.info("turn %s scheduled task %s in %s", deps.turn_id, task.id, deps.group)
    return f"Scheduled: {task.describe()}"


async def list_tasks(ctx: RunContext[TurnDeps]) -> str:
    """List this chat's scheduled tasks."""
    store = _store(ctx.deps)
    if store is None:
        return "Scheduled tasks are not available in this chat."
    tasks = await asyncio.to_thread(store.all)
    if not tasks:
        return "This chat has no scheduled tasks."
    return "\n".join(f"- {t.describe()}" for t in tasks)


async def _change(deps: TurnDeps, name: str, action: str) -> str:
    why = tainted(deps)
    if why is not None:
        return f"Refused: {why}."
    store, asker = _store(deps), _asker(deps)
    if store is None or asker is None:
        return "Scheduled tasks are not available in this chat."
    try:
        tid = task_id(name)
    except TaskError as err:
        return f"Refused: {err}."
    task = await asyncio.to_thread(store.get, tid)
    if task is None:
        return f"No task named {tid!r} in this chat."
    who = asker.sender_key
    if who != task.creator and role_of(asker, deps.admins) not in TRUSTED_ROLES:
        return (f"Refused: {task.name} was created by {task.creator}; only they, a chat "
                "admin or the operator may change it.")
    actor = f"agent:{deps.turn_id}"
    if action == "cancel":
        await asyncio.to_thread(store.delete, tid, actor=actor, why=f"cancelled by {who}")
        return f"Cancelled {task.name}."
    await asyncio.to_thread(store.update, tid, actor=actor, state="paused",
                            why=f"paused by {who}")
    await asyncio.to_thread(store.log_run, tid, "paused", detail=f"by {who}")
    return f"Paused {task.name} (resume it with /tasks resume {tid})."


async def pause_task(ctx: RunContext[TurnDeps], name: str) -> str:
    """Pause one of this chat's scheduled tasks (its creator or an admin only).

    Args:
        name: the task's name, as list_tasks shows it.
    """
    return await _change(ctx.deps, name, "pause")


async def cancel_task(ctx: RunContext[TurnDeps], name: str) -> str:
    """Cancel (remove) one of this chat's scheduled tasks (its creator or an admin only).

    Args:
        name: the task's name, as list_tasks shows it.
    """
    return await _change(ctx.deps, name, "cancel")


def task_tools() -> list[Tool[TurnDeps]]:
    """The task tools, offered next to ``workers.tools.agent_tools``."""
    return [Tool(f, takes_ctx=True) for f in (schedule_task, list_tasks, pause_task,
                                               cancel_task)]

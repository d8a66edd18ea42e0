"""``pynanoclaw tasks list|show|pause|resume|cancel|log``: the operator's view of every
chat's scheduled tasks (gateway/tasks). The operator may change any task. Works on the
files alone when Redis is down (a resume then waits for the scheduler's next rescan);
with Redis, ``show`` says when a task runs next and a resume or a pause holds at once.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import redis
import typer

from gateway.config import Settings
from gateway.operations._cliparts import ConfigOpt, fail, load, sub_app
from gateway.operations._redis_server import bot_redis_url

if TYPE_CHECKING:
    from gateway.tasks import TaskDesk

tasks_app = sub_app(help="scheduled tasks of every chat", no_args_is_help=True)

Group = Annotated[str, typer.Argument(help="the chat's group key, e.g. telegram:-100123")]
Name = Annotated[str, typer.Argument(help="the task's name")]
#: who the audit log names for the CLI's changes
OPERATOR = "operator:cli"


def _desk(config: Path | None) -> tuple[Settings, TaskDesk]:
    # imported here, as in every command below: the task desk loads the group files and
    # their schedules (yaml, croniter), which the CLI's other commands never need
    from gateway.tasks import TaskDesk

    _, cfg = load(config, channels=False)
    client: redis.Redis | None = None
    url = bot_redis_url(cfg)
    if url:
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            client.ping()
        except (redis.RedisError, OSError):
            with contextlib.suppress(Exception):
                client.close()
            client = None
            typer.echo("note: Redis is not reachable; working on the task files alone",
                       err=True)
    return cfg, TaskDesk(cfg, client)


@tasks_app.command("list")
def list_(group: Annotated[str | None, typer.Argument(help="only this chat")] = None,
          config: ConfigOpt = None) -> None:
    """Every chat's tasks (or one chat's)."""
    from gateway.intake._groupfiles import GroupFiles
    from memory_store.tasks import TaskStore

    cfg, desk = _desk(config)
    if group is not None:
        typer.echo(desk.list(group))
        return
    found = False
    for gd in GroupFiles.of(cfg).groups_with_tasks():
        if TaskStore(gd).all():
            found = True
            typer.echo(f"[{gd.group}]\n{desk.list(gd.group)}")
    if not found:
        typer.echo("No scheduled tasks.")


def _run(action: str, group: str, name: str, config: Path | None) -> None:
    _, desk = _desk(config)
    try:
        if action == "show":
            out = desk.show(group, name)
        elif action == "log":
            out = desk.log(group, name, last=50)
        else:
            out = desk.change(group, action, name, by=OPERATOR, may_any=True)
    except ValueError as err:  # an invalid group key
        raise fail(str(err)) from None
    typer.echo(out)
    if out.startswith(("No task", "Say which", "give the task")):
        raise typer.Exit(1)


@tasks_app.command()
def show(group: Group, name: Name, config: ConfigOpt = None) -> None:
    """One task: its schedule, state, creator and next run."""
    _run("show", group, name, config)


@tasks_app.command()
def log(group: Group, name: Name, config: ConfigOpt = None) -> None:
    """A task's run log (fired, missed, ok, failed, skipped), newest last."""
    _run("log", group, name, config)


@tasks_app.command()
def pause(group: Group, name: Name, config: ConfigOpt = None) -> None:
    """Stop a task from running until it is resumed."""
    _run("pause", group, name, config)


@tasks_app.command()
def resume(group: Group, name: Name, config: ConfigOpt = None) -> None:
    """Run a paused task again (runs missed while paused are not caught up)."""
    _run("resume", group, name, config)


@tasks_app.command()
def cancel(group: Group, name: Name, config: ConfigOpt = None) -> None:
    """Remove a task (its run log stays)."""
    _run("cancel", group, name, config)

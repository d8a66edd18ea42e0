"""Operator commands: ``pynanoclaw status`` and ``pynanoclaw dead list|retry|drop``.

Mounted from ``gateway/cli.py`` (``register``). The work is done by ``gateway.operations._status``
and ``gateway.operations._deadletters``; this module parses arguments and prints. Those two
are imported by the command that uses them: they load the inbox and its memory files,
which every other command (the bot's start, `pynanoclaw chat`) would pay for.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gateway.config import CommandExit
from gateway.operations._cliparts import ConfigOpt, config_file, fail, running_client, sub_app

dead_app = sub_app(help="dead letters: turns that failed for good", no_args_is_help=True)


def status(
    config: ConfigOpt = None,
    model: Annotated[bool, typer.Option(help="run the one-token model test")] = True,
) -> None:
    """Can the bot answer? One line per check; exit status 1 when one fails (a chat
    goes unanswered), 3 when none fails but one warns (voice notes untranscribed)."""
    from gateway.operations._status import exit_status, status_checks

    checks = []
    for check in status_checks(config_file(config), model=model):
        typer.echo(check.line())
        checks.append(check)
    if code := exit_status(checks):
        raise typer.Exit(code)


@dead_app.command("list")
def dead_list(
    group: Annotated[str | None, typer.Argument(help="e.g. local:ada [default: all]")] = None,
    config: ConfigOpt = None,
) -> None:
    """What failed, when, and why."""
    from gateway.operations._deadletters import list_dead, list_skipped, when

    _, client = running_client(config)
    with client:
        groups = list_dead(client, group)
        skipped = [] if group else list_skipped(client)
    if not groups and not skipped:
        typer.echo("no dead letters")
    for s in skipped:  # never queued, so nothing to retry: shown so it is not lost quietly
        typer.echo(f"{s.channel}:{s.account}: {len(s.records)} skipped on arrival "
                   "(never queued)")
        for record in s.records:
            typer.echo(f"  {s.line(record)}")
    for g in groups:
        typer.echo(f"{g.group}: {len(g.messages)} message(s)")
        for rec in g.records:
            typer.echo(f"  {when(rec.at)}  {rec.turn_id or '-'}  {rec.why}")
        for m in g.messages:
            text = m.text if len(m.text) <= 80 else m.text[:77] + "..."
            typer.echo(f"  #{m.seq} {m.received_at} {m.sender}: {text}")


@dead_app.command("retry")
def dead_retry(
    group: Annotated[str | None, typer.Argument(help="the group, e.g. local:ada")] = None,
    all_groups: Annotated[bool, typer.Option("--all", help="every group")] = False,
    config: ConfigOpt = None,
) -> None:
    """Put dead letters back into their mailbox, in order, once."""
    if (group is None) == (not all_groups):
        raise fail("name one GROUP or pass --all")
    from gateway.operations._deadletters import retry_dead

    cfg, client = running_client(config)
    with client:
        moved = retry_dead(client, cfg, group)
    if not moved:
        typer.echo("no dead letters to retry")
    for g, n in moved.items():
        typer.echo(f"{g}: {n} message(s) back in the mailbox")


@dead_app.command("drop")
def dead_drop(
    group: Annotated[str, typer.Argument(help="the group, e.g. local:ada")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    config: ConfigOpt = None,
) -> None:
    """Delete a group's dead letters (asks first)."""
    from gateway.queue import DeadLetters

    _, client = running_client(config)
    with client:
        if not yes and not typer.confirm(f"drop the dead letters of {group} for good?"):
            raise typer.Exit(CommandExit.FAILED)
        typer.echo(f"{group}: {DeadLetters(client).drop(group)} message(s) dropped")

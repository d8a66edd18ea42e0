"""Operator commands: ``pynanoclaw status`` and ``pynanoclaw dead list|retry|drop``.

Mounted from ``gateway/cli.py`` (``register``). The work is done by ``gateway.status``
and ``gateway.deadletters``; this module parses arguments and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import redis
import typer

from gateway.config import CONFIG_ENV, ConfigError, GatewayConfig, default_config_path, load_config
from gateway.deadletters import drop_dead, list_dead, list_skipped, retry_dead, when
from gateway.redis_server import running_embedded_url
from gateway.status import run_checks

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help=f"config file [default: ${CONFIG_ENV} or "
                 "data/pynanoclaw.toml]", show_default=False),
]

dead_app = typer.Typer(help="dead letters: turns that failed for good", no_args_is_help=True,
                       add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _client(config: Path | None) -> tuple[GatewayConfig, redis.Redis]:
    try:
        cfg = load_config((config or default_config_path()).resolve())
    except ConfigError as err:
        typer.echo(err.render(), err=True)
        raise typer.Exit(2) from None
    url = cfg.redis.url or running_embedded_url(cfg.redis_dir)
    if not url:
        raise _fail("redis: no [redis] url and no embedded server running; start "
                    "`pynanoclaw run` first")
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        client.ping()
    except (redis.RedisError, OSError) as err:
        raise _fail(f"redis: cannot reach {url.split('@')[-1]} ({err})") from None
    return cfg, client


def status(
    config: ConfigOpt = None,
    model: Annotated[bool, typer.Option(help="run the one-token model test")] = True,
) -> None:
    """Can the bot answer? One line per check; exit status 1 when one fails."""
    failed = 0
    for check in run_checks((config or default_config_path()).resolve(), model=model):
        typer.echo(check.line())
        failed += not check.ok
    if failed:
        raise typer.Exit(1)


@dead_app.command("list")
def dead_list(
    group: Annotated[str | None, typer.Argument(help="e.g. local:ada [default: all]")] = None,
    config: ConfigOpt = None,
) -> None:
    """What failed, when, and why."""
    _, client = _client(config)
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
        raise _fail("name one GROUP or pass --all")
    cfg, client = _client(config)
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
    _, client = _client(config)
    with client:
        if not yes and not typer.confirm(f"drop the dead letters of {group} for good?"):
            raise typer.Exit(1)
        typer.echo(f"{group}: {drop_dead(client, group)} message(s) dropped")

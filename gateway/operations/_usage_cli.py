"""``pynanoclaw usage`` (spend by day, call kind, group and person; ``--json``) and
``pynanoclaw usage cap SCOPE PERIOD AMOUNT`` (set, lift or reset a cap at run time).

Talks to the configured Redis, or the running embedded one (``cliparts.running_client``).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gateway.operations._cliparts import ConfigOpt, fail, running_client, sub_app
from gateway.operations._usage import parse_usd, render_report, usage_report, usd
from gateway.queue import Budget, Keys

usage_app = sub_app(help="model usage and spending caps", invoke_without_command=True)

#: what ``cap`` accepts besides an amount: back to the config's cap
DEFAULT_WORD = "default"


@usage_app.callback()
def usage(
    ctx: typer.Context,
    days: Annotated[int, typer.Option(help="days back, today included", min=1)] = 7,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable")] = False,
    config: ConfigOpt = None,
) -> None:
    """Spend by day, call kind, group and person; the global caps and what they left."""
    if ctx.invoked_subcommand is not None:
        return
    cfg, client = running_client(config)
    with client:
        report = usage_report(Budget(client, Keys()), cfg, days)
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    for line in render_report(report):
        typer.echo(line)


@usage_app.command("cap")
def cap(
    scope: Annotated[str, typer.Argument(
        help="global, group:<channel:chat> or person:<id> (e.g. group:telegram:-100123)")],
    period: Annotated[str, typer.Argument(help="day or month")],
    amount: Annotated[str, typer.Argument(
        help="USD (e.g. 5 or 0.50), none (lift the cap) or default (the config's)")],
    config: ConfigOpt = None,
) -> None:
    """Set, lift or reset a cap now; groups a cap stopped get their turn again."""
    if scope != "global" and not scope.startswith(("group:", "person:")):
        raise fail("SCOPE must be global, group:<channel:chat> or person:<id>")
    if period not in ("day", "month"):
        raise fail("PERIOD must be day or month")
    _, client = running_client(config)
    with client:
        budget = Budget(client, Keys())
        if amount.lower() == DEFAULT_WORD:
            released = budget.reset_cap(scope, period)
            what = "back to the config's cap"
        else:
            try:
                micro = parse_usd(amount)
            except ValueError:
                raise fail("AMOUNT must be USD (e.g. 5 or 0.50), none or default") from None
            released = budget.set_cap(scope, period, micro)
            what = "lifted" if micro is None else f"set to {usd(micro)}"
    typer.echo(f"{scope} {period} cap {what}; {released} stopped group(s) resume")

"""``pynanoclaw pair list|approve CODE|deny CODE``: the operator's side of DM pairing.

Works whether the bot runs or not: it talks to the configured Redis, or to the running
embedded one, or starts the embedded one just for the command (the approval is then
in its data directory when the bot starts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import redis
import redis.asyncio as aioredis
import typer

from gateway.config import CommandExit
from gateway.intake._pairing import PairingStore
from gateway.operations._cliparts import ConfigOpt, any_redis, fail, load, sub_app
from gateway.queue import Keys

T = TypeVar("T")

pair_app = sub_app(no_args_is_help=True)

CodeArg = Annotated[str, typer.Argument(help="the code the person received")]


def _with_store(config: Path | None, action: Callable[[PairingStore], Awaitable[T]]) -> T:
    _, cfg = load(config)

    async def go(url: str) -> T:
        async with aioredis.Redis.from_url(url) as client:
            return await action(PairingStore(client, Keys().prefix))

    with any_redis(cfg) as url:
        try:
            return asyncio.run(go(url))
        except (redis.RedisError, OSError) as err:
            raise fail(f"redis: {err}") from None


@pair_app.command("list")
def list_requests(config: ConfigOpt = None) -> None:
    """Pending pairing codes, oldest first, then the approved people."""
    async def both(store: PairingStore) -> tuple[list[str], dict[str, str]]:
        now = time.time()
        pending = [f"{r.code}  {r.user}  {r.name}  ({int(now - r.created) // 60} min ago)"
                   for r in await store.pending()]
        return pending, await store.approved()

    pending, approved = _with_store(config, both)
    typer.echo("pending:" if pending else "pending: none")
    for line in pending:
        typer.echo(f"  {line}")
    typer.echo("approved:" if approved else "approved: none")
    for user, name in sorted(approved.items()):
        typer.echo(f"  {user}  {name}")


def _decide(config: Path | None, code: str, *, approve: bool) -> None:
    request = _with_store(
        config, lambda store: store.approve(code) if approve else store.deny(code))
    if request is None:
        typer.echo(f"error: no pending code {code!r} (wrong or expired)", err=True)
        raise typer.Exit(CommandExit.FAILED)
    typer.echo(f"{'approved' if approve else 'denied'} {request.user} ({request.name})")


@pair_app.command()
def approve(code: CodeArg, config: ConfigOpt = None) -> None:
    """Let the person who got CODE talk to the bot in DMs."""
    _decide(config, code, approve=True)


@pair_app.command()
def deny(code: CodeArg, config: ConfigOpt = None) -> None:
    """Refuse CODE; the person gets no new code for a day."""
    _decide(config, code, approve=False)

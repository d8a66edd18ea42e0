"""``pynanoclaw pair list|approve CODE|deny CODE``: the operator's side of DM pairing.

Works whether the bot runs or not: it talks to the configured Redis, or to the running
embedded one, or starts the embedded one just for the command (the approval is then
in its data directory when the bot starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, TypeVar

import redis
import redis.asyncio as aioredis
import typer

from gateway.config import GatewayConfig
from gateway.pairing import PairingStore
from gateway.queue import Keys
from gateway.redis_server import running_embedded_url

T = TypeVar("T")

pair_app = typer.Typer(no_args_is_help=True, add_completion=False,
                       pretty_exceptions_enable=False, rich_markup_mode=None)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="config file",
                                                show_default=False)]
CodeArg = Annotated[str, typer.Argument(help="the code the person received")]


@contextlib.contextmanager
def _url(cfg: GatewayConfig) -> Iterator[str]:
    from gateway import cli

    url = cfg.redis.url or running_embedded_url(cfg.redis_dir)
    if url:
        yield url
        return
    with cli._redis(cfg) as (started, _embedded):
        yield started


def _with_store(config: Path | None, action: Callable[[PairingStore], Awaitable[T]]) -> T:
    from gateway import cli

    _, cfg = cli._load(config)

    async def go(url: str) -> T:
        client = aioredis.Redis.from_url(url)
        try:
            return await action(PairingStore(client, Keys().prefix))
        finally:
            await client.aclose()

    with _url(cfg) as url:
        try:
            return asyncio.run(go(url))
        except (redis.RedisError, OSError) as err:
            raise cli._fail(f"redis: {err}") from None


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


@pair_app.command()
def approve(code: CodeArg, config: ConfigOpt = None) -> None:
    """Let the person who got CODE talk to the bot in DMs."""
    request = _with_store(config, lambda store: store.approve(code))
    if request is None:
        typer.echo(f"error: no pending code {code!r} (wrong or expired)", err=True)
        raise typer.Exit(1)
    typer.echo(f"approved {request.user} ({request.name})")


@pair_app.command()
def deny(code: CodeArg, config: ConfigOpt = None) -> None:
    """Refuse CODE; the person gets no new code for a day."""
    request = _with_store(config, lambda store: store.deny(code))
    if request is None:
        typer.echo(f"error: no pending code {code!r} (wrong or expired)", err=True)
        raise typer.Exit(1)
    typer.echo(f"denied {request.user} ({request.name})")

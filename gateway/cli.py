"""``pynanoclaw``: run the bot, scale it out, talk to it locally.

User errors (configuration, unreachable Redis) print one message naming the key and
the fix, and exit with status 2; no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import redis
import typer

import gateway.operations._opscli as opscli
from channels.redact import setup_logging
from gateway import wait_any
from gateway.config import (
    CommandExit,
    ConfigError,
    Settings,
    background_workers,
    load_config,
    transcribe_workers,
)
from gateway.operations._cliparts import (
    NO_REDIS_URL,
    ConfigOpt,
    LogOpt,
    config_file,
    fail,
    load,
    started_redis,
)
from gateway.operations._init_cli import init_command
from gateway.operations._pair_cli import pair_app
from gateway.operations._redis_server import (
    EmbeddedRedis,
    bot_redis_url,
    ping,
)
from gateway.operations._smoke import CACHE_NAME, check_model
from gateway.operations._supervisor import ConfigExit, WorkerSupervisor, worker_command, worker_env
from gateway.operations._tasks_cli import tasks_app
from gateway.operations._usage_cli import usage_app
from gateway.queue import Keys, background_queue, transcribe_queue, worker_queues
from gateway.toolhost.cli import tools_command as tools_cli
from gateway.toolhost.process import tools_supervisor
from memory_store import build_memory_app

log = logging.getLogger("pynanoclaw")

app = typer.Typer(
    name="pynanoclaw",
    help="PyNanoClaw: a self-hosted chat assistant with per-group memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

WorkerClassOpt = Annotated[
    str, typer.Option("--worker-class", help="simple (in-process jobs) or fork (child per job)")
]


async def _run_gateway(cfg: Settings, url: str, sup: WorkerSupervisor | None,
                       embedded: EmbeddedRedis | None = None,
                       tools: WorkerSupervisor | None = None) -> None:
    from gateway.app import Gateway

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    gw = Gateway(cfg, url)
    if sup is not None:
        gw.reporters.append(sup.state)
    if embedded is not None:
        gw.reporters.append(embedded.health)
    try:
        await gw.start()
        log.info("gateway running with %d channel(s); Ctrl-C stops it",
                 len(gw.channels))
        while not stop.is_set():
            if embedded is not None:  # restarts a crashed server on its port (seconds);
                # never raises: a full disk or a failing restart is reported, not fatal
                await asyncio.to_thread(embedded.check)
            if sup is not None:
                sup.poll()
            if tools is not None:  # the tool host, restarted like a worker
                tools.poll()
            await wait_any(1.0, stop)
    finally:
        log.info("stopping")
        await gw.stop()


@app.command()
def run(
    config: ConfigOpt = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-w", help="worker processes [default: [queue] workers or 1]")] = None,
    worker_class: WorkerClassOpt = "simple",
    log_level: LogOpt = "INFO",
) -> None:
    """Everything on one machine: embedded Redis (unless [redis] url), the gateway and
    worker processes. Ctrl-C stops them all."""
    path, cfg = load(config)
    setup_logging(log_level)
    count = workers if workers is not None else cfg.queue.workers
    with started_redis(cfg) as (url, embedded):
        command = functools.partial(worker_command, path, worker_class=worker_class,
                                    log_level=log_level)
        cmd = command(queues=worker_queues(cfg.queue.name))
        background = command(queues=[background_queue(cfg.queue.name)])
        # voice notes: their own worker, one transcription at a time (gateway.queue.transcribe)
        transcribe = command(queues=[transcribe_queue(cfg.queue.name)], preload=False)
        voices, why_not = transcribe_workers(cfg)
        if why_not:
            log.warning("%s", why_not)
        sup = WorkerSupervisor(count, cmd, env=worker_env(cfg, os.environ, url),
                               extra=[background] * background_workers(cfg)
                               + [transcribe] * voices)
        tools = tools_supervisor(cfg, path, url, log_level)
        sup.start()
        if tools is not None:
            tools.start()
        try:
            asyncio.run(_run_gateway(cfg, url, sup, embedded, tools))
        except ConfigError as err:
            raise fail(err) from None
        except ConfigExit as err:
            raise fail(str(err)) from None
        finally:
            sup.stop()
            if tools is not None:
                tools.stop()


@app.command()
def gateway(config: ConfigOpt = None, log_level: LogOpt = "INFO") -> None:
    """The gateway alone (channels, inbox, outbox); starts the embedded Redis when
    [redis] url is empty. Run workers with `pynanoclaw worker`."""
    _, cfg = load(config)
    setup_logging(log_level)
    with started_redis(cfg) as (url, embedded):
        try:
            asyncio.run(_run_gateway(cfg, url, None, embedded))
        except ConfigError as err:
            raise fail(err) from None


@app.command()
def worker(
    config: ConfigOpt = None,
    redis_url: Annotated[str | None, typer.Option(
        "--redis-url", help="[default: [redis] url or the local embedded server]")] = None,
    worker_class: WorkerClassOpt = "simple",
    burst: Annotated[bool, typer.Option(help="exit when the queue is empty")] = False,
    background_only: Annotated[bool, typer.Option(
        "--background-only", help="take only background jobs (fact extraction, "
        "consolidation, redaction), never a turn")] = False,
    log_level: LogOpt = "INFO",
) -> None:
    """One worker process (scale out: start more on the host whose local disk holds the
    data directory; see the README's "Scaling out")."""
    path, cfg = load(config)
    url = redis_url or bot_redis_url(cfg)
    if not url:
        raise fail(NO_REDIS_URL)
    queues = ([background_queue(cfg.queue.name)] if background_only
              else worker_queues(cfg.queue.name))
    cmd = worker_command(path, worker_class=worker_class, queues=queues,
                         log_level=log_level, burst=burst)
    # replaces this process (no shell involved), with the worker's allowlisted environment
    os.execve(cmd[0], cmd, worker_env(cfg, os.environ, url))  # noqa: S606


def _gateway_alive(url: str) -> bool:
    try:
        with redis.Redis.from_url(url, socket_timeout=2) as client:
            return bool(client.exists(Keys().gateway_alive))
    except (redis.RedisError, OSError):
        return False


@contextlib.contextmanager
def _stack(path: Path, cfg: Settings, timeout: float = 90.0) -> Iterator[str]:
    """The Redis URL of a running gateway; starts `pynanoclaw run` in the background
    (and stops it afterwards) only when no Redis answers."""
    if "local" not in cfg.channels:
        raise fail(f"{path}: channels.local: the local chat needs the local channel; add "
                    "a line [channels.local] to the config")
    url = bot_redis_url(cfg)
    if url and ping(url):
        # Redis answers: a bot owns it, or one will (a gateway whose heartbeat lapsed
        # because Redis refuses writes is still running). A second `run` against the
        # same Redis and data dir would only compete with it.
        if not _gateway_alive(url):
            typer.echo("(Redis answers but no gateway heartbeat: the bot may be down or "
                       "Redis may refuse writes; see `pynanoclaw status`)", err=True)
        yield url
        return
    # Before starting the bot: a model that cannot answer one token would otherwise
    # leave the chat "typing" forever while workers crash in the background. Skipped
    # while nothing it depended on changed since it passed (gateway.operations._smoke).
    problem = check_model(path, cache=cfg.data_dir / CACHE_NAME)
    if problem is not None:
        raise fail(problem)
    logs = cfg.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "run.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "run", "--config", str(path),
             "--log-level", "WARNING"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    typer.echo(f"(starting the bot in the background; log: {log_path})", err=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            url = bot_redis_url(cfg)
            if url and _gateway_alive(url):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
                raise fail(f"the bot did not start; the end of {log_path}:\n{tail}")
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _send(url: str, chat: str, user: str, text: str, group: bool, mention: bool,
                timeout: float) -> str | None:
    from gateway.operations._localclient import LocalClient

    client = LocalClient(url)
    try:
        ex = await client.ask(chat_id=chat, user=user, text=text, is_group=group,
                              mention=mention, timeout=timeout)
    finally:
        await client.aclose()
    if ex.status == "timeout":
        raise fail(f"no answer within {timeout:.0f}s (is the bot running? see "
                    "`pynanoclaw status`)")
    if ex.status in ("engage", "command", "pairing") and not ex.done:
        # taken, but no reply in time: a script must tell this from "did not engage"
        raise fail(f"no reply within {timeout:.0f}s (the message is stored and will be "
                    "answered; is a worker running? see `pynanoclaw status`)")
    return ex.reply


@app.command()
def send(
    text: Annotated[str, typer.Argument(help="the message")],
    chat: Annotated[str, typer.Option("--chat", help="chat name (a DM unless --group)")],
    user: Annotated[str, typer.Option("--user", help="who is speaking")],
    group: Annotated[bool, typer.Option("--group", help="the chat is a group")] = False,
    mention: Annotated[bool, typer.Option("--mention", help="@mention the bot")] = False,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the reply")] = 300.0,
    config: ConfigOpt = None,
) -> None:
    """Send one message through the local channel and print the reply (nothing if the
    bot did not engage; exit status 2 when no reply came within --timeout)."""
    path, cfg = load(config)
    with _stack(path, cfg) as url:
        try:
            reply = asyncio.run(_send(url, chat, user, text, group, mention, timeout))
        except (redis.RedisError, OSError) as err:
            raise fail(f"lost the connection to the bot ({err}); see "
                        f"{cfg.data_dir / 'logs' / 'run.log'}") from None
    if reply:
        typer.echo(reply)


async def _chat_loop(url: str, chat: str, user: str, group: bool) -> None:
    from gateway.operations._localclient import LocalClient

    client = LocalClient(url)
    after = await client.last_id(chat)
    stop = asyncio.Event()
    pending: set[str] = set()  # sent, and not yet known to need no answer or answered
    # Piped input (`echo hello | pynanoclaw chat`): print the replies alone, no prompts.
    interactive = sys.stdin.isatty()
    prompt = f"{user}> " if interactive else ""

    async def printer() -> None:
        nonlocal after
        while not stop.is_set():
            after, events = await client.events(chat, after, block_ms=300)
            for ev in events:
                kind = ev.get("type")
                if kind == "chunk" and not interactive:
                    typer.echo(ev.get("text", ""))
                elif kind == "chunk":
                    typer.echo(f"\rbot> {ev.get('text', '')}\n{prompt}", nl=False)
                elif kind == "typing" and interactive:
                    typer.echo(f"\r(bot is typing...)\n{prompt}", nl=False)
                elif kind == "ack" and ev.get("message_id") in pending and \
                        ev.get("status") != "engage":
                    pending.discard(ev["message_id"])
                elif kind == "done":
                    pending.difference_update(json.loads(ev.get("message_ids", "[]")))

    task = asyncio.get_running_loop().create_task(printer())
    where = f"group '{chat}' (mention the bot with @bot)" if group else f"a DM '{chat}'"
    if interactive:
        typer.echo(f"Chatting as {user} in {where}. Ctrl-D to quit.")
    try:
        while True:
            line = await asyncio.to_thread(_read_line, prompt)
            if line is None:
                break
            if line.strip():
                pending.add(await client.push(chat_id=chat, user=user, text=line,
                                              is_group=group))
        # end of input (e.g. piped): let the answers to what was sent arrive first
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 300
        while pending and loop.time() < deadline and not task.done():
            await asyncio.sleep(0.1)
        if interactive:
            typer.echo("")
        elif pending:  # scripted use must see a missing answer in the exit status
            typer.echo(f"error: no answer to {len(pending)} message(s) within 300s", err=True)
            raise typer.Exit(1)
    finally:
        stop.set()
        await task
        await client.aclose()


def _read_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


@app.command()
def chat(
    chat: Annotated[str | None, typer.Option("--chat", help="chat name [default: DM with you]")]
    = None,
    user: Annotated[str | None, typer.Option("--user", help="who you are [default: $USER]")]
    = None,
    group: Annotated[bool, typer.Option("--group", help="a group chat (bot answers @bot)")]
    = False,
    config: ConfigOpt = None,
) -> None:
    """Interactive chat through the local channel; starts the bot if it is not running."""
    path, cfg = load(config)
    who = user or os.environ.get("USER") or "me"
    with _stack(path, cfg) as url, contextlib.suppress(KeyboardInterrupt):
        try:
            asyncio.run(_chat_loop(url, chat or who, who, group))
        except (redis.RedisError, OSError) as err:
            raise fail(f"lost the connection to the bot ({err}); see "
                        f"{cfg.data_dir / 'logs' / 'run.log'}") from None


def _memory_settings(config: Path | None) -> tuple[Path, str, dict[str, Any]]:
    """The memory CLI's slice of the config: data dir, backend and its options (a search
    ranks as the bot's does)."""
    from gateway.intake._groupfiles import GroupFiles  # the memory files: not for `run`

    try:
        files = GroupFiles.of(load_config(config_file(config)))
    except ConfigError as err:
        raise ValueError(err.render()) from None
    return files.data_dir, files.backend, files.options


app.add_typer(build_memory_app(_memory_settings), name="memory",
              help="inspect and edit group memory")
app.command()(opscli.status)
app.command("tools")(tools_cli)
app.command("init", help="write a config file by asking (or from flags)")(init_command)
app.add_typer(opscli.dead_app, name="dead")

app.add_typer(pair_app, name="pair", help="DM pairing: list, approve or deny codes")
app.add_typer(usage_app, name="usage", help="model usage and spending caps")
app.add_typer(tasks_app, name="tasks", help="scheduled tasks: list, show, pause, resume, "
              "cancel, log")


def main() -> None:
    try:
        app()
    except ConfigError as err:
        typer.echo(err.render(), err=True)
        sys.exit(CommandExit.USAGE)


if __name__ == "__main__":
    main()

"""``pynanoclaw status``: is this bot able to answer, one line per check.

Checks, in order: the configuration, free space on the data dir (``[disk]``
watermarks), Redis (reachable, and persistent: append-only file or snapshots, else a
restart loses every queued message; writing its append-only file and within its
``maxmemory``: gateway/operations/_pressure.py), workers and, while voice notes are transcribed,
transcription workers (RQ's registry, so it sees workers wherever they run; a
registration left by a worker of this host that no longer runs is not counted), turns
being retried or in a crash loop, dead letters and inbound the channels
skipped on arrival (all from Redis), spending caps, the model (the one-token smoke test,
``gateway.operations._smoke``), and each channel's credentials (``Channel.check()``).

A failed check (``FAIL``) is one that keeps some chat from an answer: the exit status is
1. A check that warns (``WARN``) is a degraded bot, not a dead one: every chat is still
answered, some messages less well. The voice checks are the ones: without a
transcription worker (or the voice extra) a voice note reaches the model untranscribed,
told so, after a short wait, and its job stays queued for when a worker starts. With
warnings and no failure the exit status is 3 (``CommandExit.DEGRADED``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import redis

from channels.errors import PermanentError
from gateway.config import (
    CommandExit,
    ConfigError,
    Settings,
    load_config,
    transcribe_workers,
    voice_can_arrive,
)
from gateway.operations._channelstart import credential_envs, one_line
from gateway.operations._deadletters import list_skipped
from gateway.operations._pressure import disk_problem, free_mb, redis_problems
from gateway.operations._redis_server import bot_redis_url
from gateway.operations._smoke import check_model
from gateway.queue import (
    Budget,
    DeadLetters,
    Keys,
    background_queue,
    period_ids,
    transcribe_queue,
)
from gateway.queue.procs import live_workers

#: seconds a platform gets to answer a credential check
CHECK_TIMEOUT = 15.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    #: when not ``ok``: a degraded bot (WARN), not one that leaves a chat unanswered (FAIL)
    warning: bool = False

    def line(self) -> str:
        tag = "ok  " if self.ok else "WARN" if self.warning else "FAIL"
        return f"{tag} {self.name}: {self.detail}"


def exit_status(checks: Iterable[Check]) -> int:
    """``pynanoclaw status``'s exit status for ``checks``: 1 when one failed (whatever
    warned too), 3 when some warned and none failed, else 0."""
    bad = [c for c in checks if not c.ok]
    if any(not c.warning for c in bad):
        return int(CommandExit.FAILED)
    return int(CommandExit.DEGRADED) if bad else 0


def status_checks(path: Path, *, model: bool = True) -> Iterator[Check]:
    """Every check for the config at ``path``, as they complete."""
    from gateway.app import build_channels, load_channel_class
    from gateway.toolhost.status import tools_line

    try:
        cfg = load_config(path)
        for name in cfg.channels:
            load_channel_class(name, path)
    except ConfigError as err:
        yield Check("config", False, " ".join(err.render().split()))
        return
    yield Check("config", True, str(path))
    disk = disk_problem(cfg.data_dir, cfg.disk)
    yield Check("disk", disk is None, disk.removeprefix("disk: ") if disk else
                f"{free_mb(cfg.data_dir):.0f} MB free on {cfg.data_dir}")
    url = bot_redis_url(cfg)
    client = _redis(url)
    if isinstance(client, Check):
        yield client
    else:
        with client:
            yield from _queue_checks(client, cfg)
            if (tools := tools_line(client, cfg)) is not None:
                yield Check("tools", *tools)
    if why_not := transcribe_workers(cfg)[1]:  # voice notes could come, untranscribed
        yield Check("voice", False, why_not, warning=True)
    if model:
        problem = check_model(path)
        yield Check("model", problem is None,
                    "answered a one-token test" if problem is None else problem)
    try:  # channels read their secrets from the env; the local one needs Redis's URL
        channels = build_channels(cfg, os.environ, redis_url=url or None)
    except ConfigError as err:
        yield Check("channels", False, " ".join(err.render().split()))
        return
    for (name, account), channel in channels.items():
        yield asyncio.run(channel_check(f"channel {name}:{account}", channel))


def _redis(url: str | None) -> redis.Redis | Check:
    if not url:
        return Check("redis", False, "no [redis] url and no embedded server running; "
                     "start `pynanoclaw run` (or `pynanoclaw gateway`)")
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.ResponseError:
        return client  # it answers (MISCONF: refusing writes); _queue_checks says why
    except (redis.RedisError, OSError) as err:
        client.close()
        return Check("redis", False, f"cannot reach {url.split('@')[-1]}: {one_line(err)}")
    return client


def _queue_checks(client: redis.Redis, cfg: Settings) -> Iterator[Check]:
    conf = {**client.config_get("appendonly"), **client.config_get("save")}
    aof, save = conf.get("appendonly") == "yes", bool(conf.get("save"))
    yield Check("redis", aof or save,
                "reachable, persistent (" + ("append-only file" if aof else "snapshots") + ")"
                if aof or save else "reachable but NOT persistent (appendonly no, no save "
                "points): a restart loses every queued message; set appendonly yes")
    for problem in redis_problems(client):
        yield Check("redis state", False, problem.removeprefix("redis: "))
    stale: set[str] = set()
    workers = live_workers(client, cfg.queue.name, stale)
    # background-only workers (`--background-only`) listen to that queue alone
    names = {w.name for w in workers} | stale
    background = [w for w in live_workers(client, background_queue(cfg.queue.name), stale)
                  if w.name not in names]
    also = f" (+{len(background)} for background jobs only)" if background else ""
    if stale:
        also += (f"; {len(stale)} registration(s) of dead workers on this host not "
                 "counted")
    yield Check("workers", bool(workers),
                f"{len(workers)} alive on queue {cfg.queue.name}{also}" if workers else
                f"none alive on queue {cfg.queue.name}{also}: messages are stored and wait; "
                "start `pynanoclaw run` or `pynanoclaw worker`")
    yield _transcription_check(client, cfg)
    dead = DeadLetters(client, Keys())
    for t in dead.retrying():
        cause = ("no error recorded: its worker died mid-turn (crash loop)" if t.crashed
                 else f"last error {t.error}")
        yield Check(f"turn {t.group}", False, f"attempt {t.attempts} of turn {t.turn_id}; "
                    f"{cause}")
    counts = dead.counts()
    for group, count in counts.items():
        records = dead.records(group)
        why = f"; last: {records[-1].why}" if records else ""
        yield Check(f"dead letters {group}", False,
                    f"{count} message(s){why}; see `pynanoclaw dead list {group}`")
    if not counts:
        yield Check("dead letters", True, "none")
    for s in list_skipped(client):
        # informational: the bot answers; these never reached a mailbox to retry
        yield Check(f"skipped {s.channel}:{s.account}", True,
                    f"{len(s.records)} inbound skipped on arrival; last: "
                    f"{s.line(s.records[-1])}; see `pynanoclaw dead list`")
    yield from _budget_checks(client, cfg)


def _budget_checks(client: redis.Redis, cfg: Settings) -> Iterator[Check]:
    """Soft budgets crossed this day/month (told once, here and in the workers' log) and
    groups a hard cap stopped (their messages wait)."""
    budget = Budget(client, Keys())
    now = period_ids(datetime.now(cfg.usage.zone))
    for field in budget.soft_crossed():
        scope, _, period = field.rpartition(":")
        if period in now.values():
            yield Check(f"soft budget {scope}", True, f"crossed this "
                        f"{'day' if period == now['day'] else 'month'}; see `pynanoclaw usage`")
    parked = budget.parked()
    if parked:
        yield Check("spending caps", False, f"{len(parked)} chat(s) stopped at a cap, messages "
                    f"kept: {', '.join(parked[:10])}; raise or lift it with "
                    "`pynanoclaw usage cap`")


def _transcription_check(client: redis.Redis, cfg: Settings) -> Check:
    queue = transcribe_queue(cfg.queue.name)
    if not voice_can_arrive(cfg):  # a worker must run: on this host or another
        return Check("transcription workers", True,
                     "none needed (transcription or downloads off, or no channel carries files)")
    stale: set[str] = set()
    alive = len(live_workers(client, queue, stale))
    also = (f"; {len(stale)} registration(s) of dead workers on this host not counted"
            if stale else "")
    return Check("transcription workers", bool(alive),
                 f"{alive} alive on queue {queue}{also}" if alive else
                 f"none alive on queue {queue}{also}: voice notes reach the model "
                 "untranscribed; start `pynanoclaw run`, or `python -m workers --queue "
                 f"{queue} --no-preload` beside `pynanoclaw worker`", warning=True)


async def channel_check(name: str, channel: object) -> Check:
    """One channel's credential line (``Channel.check()``), for status and init."""
    from channels.base import Channel

    assert isinstance(channel, Channel)
    try:
        who = await asyncio.wait_for(channel.check(), CHECK_TIMEOUT)
    except PermanentError as err:
        envs = credential_envs(channel)
        hint = f"; check {' / '.join(envs)}" if envs else ""
        return Check(name, False, f"credentials refused: {one_line(err)}{hint}")
    except TimeoutError:
        return Check(name, False, f"no answer from the platform within {CHECK_TIMEOUT:.0f}s")
    except Exception as err:  # any other failure is this channel's line, not a crash
        return Check(name, False, f"cannot check: {one_line(err)}")
    return Check(name, True, f"accepted ({who})" if who else "no credential to check")

"""The gateway process: channels in, inbox, sweeper, outbox, web server.

``Gateway(config, redis_url)`` builds the channels named in ``[channels.*]`` (adapters
are imported lazily from ``CHANNEL_REGISTRY``), starts each with the inbox as its sink,
and runs the outbox consumer, the drain sweeper and (when a channel has webhook routes
or ``[http] enabled``) the web server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from pydantic import ValidationError

import gateway.operations._redispool as redispool
from channels.base import Channel, ChannelContext
from gateway import wait_any
from gateway.config import ConfigError, Settings, describe, voice_can_arrive
from gateway.intake._commands import registry_entries
from gateway.intake._filedrop import FileDrop
from gateway.intake._groupfiles import GroupFiles
from gateway.intake._inbox import DrainEnqueuer, Inbox, Sweeper
from gateway.intake._webhooks import WebServer, build_app, has_routes
from gateway.media.downloads import MediaJob
from gateway.operations._channelstart import ChannelStarter
from gateway.operations._health import degraded, warnings
from gateway.operations._pressure import disk_problem, redis_problems
from gateway.outgoing._outbox import Outbox
from gateway.queue import DeadLetters, Keys, transcribe_queue
from gateway.queue.transcribe import transcribers
from gateway.queue.version import RedisSchemaTooNew, check_redis_schema
from gateway.tasks import Scheduler

log = logging.getLogger(__name__)

CHANNEL_REGISTRY: dict[str, str] = {
    "local": "channels.local:LocalChannel",
    "telegram": "channels.telegram:TelegramChannel",
    "slack": "channels.slack:SlackChannel",
    "discord": "channels.discord:DiscordChannel",
    "signal": "channels.signal:SignalChannel",
    "email": "channels.email:EmailChannel",
    "whatsapp": "channels.whatsapp:WhatsAppChannel",
    "matrix": "channels.matrix:MatrixChannel",
}
HEARTBEAT_TTL = 10
#: seconds before a gateway task that ended unexpectedly is started again
TASK_RESTART_DELAY = 1.0


class RedisCursorStore:
    """``channels.base.CursorStore`` over Redis, scoped to one channel account."""

    def __init__(self, client: aioredis.Redis, keys: Keys, channel: str, account: str) -> None:
        self._r = client
        self._key = functools.partial(keys.cursor, channel, account)

    async def get(self, key: str) -> str | None:
        value = await self._r.get(self._key(key))
        return None if value is None else str(value)

    async def set(self, key: str, value: str) -> None:
        await self._r.set(self._key(key), value)


def load_channel_class(name: str, where: Path | None = None) -> type[Channel]:
    """Import the adapter class registered for ``name`` (raises ``ConfigError``)."""
    path = CHANNEL_REGISTRY.get(name)
    if path is None:
        raise ConfigError(f"channels.{name}: unknown channel {name!r}; use one of "
                          f"{', '.join(sorted(CHANNEL_REGISTRY))}", where)
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"channels.{name}: the {name} adapter cannot be loaded "
                          f"({err}); install its dependencies or remove the block",
                          where) from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Channel)):
        raise ConfigError(f"channels.{name}: {path} is not a Channel class", where)
    return cls


def build_channels(
    config: Settings, env: Mapping[str, str], *, redis_url: str | None = None
) -> dict[tuple[str, str], Channel]:
    """One adapter per ``[channels.<name>]`` block, keyed by (name, account). Adapters
    read their secrets from ``env`` and learn the data dir and ``redis_url`` (the local
    channel's transport) from their ``ChannelContext``."""
    context = ChannelContext(data_dir=config.data_dir, redis_url=redis_url)
    out: dict[tuple[str, str], Channel] = {}
    for name, block in config.channels.items():
        cls = load_channel_class(name, config.source)
        account = "default"
        try:
            channel = cls.from_config(account, dict(block), env, context)
        except ValidationError as err:
            raise ConfigError(describe(err, prefix=f"channels.{name}."), config.source) from None
        except (ValueError, KeyError) as err:
            text = str(err)
            if not text.startswith(f"channels.{name}"):
                text = f"channels.{name}: {text}"
            raise ConfigError(text, config.source) from None
        out[(channel.name, channel.account)] = channel
    if not out:
        raise ConfigError("channels: no channel configured; add a block such as "
                          "[channels.local] (or [channels.telegram] with token_env)",
                          config.source)
    return out


async def register_commands(ch: Channel) -> None:
    """Publish the chat commands in the platform's registry; a failure costs only the
    platform's command menu, so it is logged and the channel keeps running."""
    try:
        await ch.register_commands(registry_entries())
    except Exception as err:
        log.warning("channel %s (%s): could not register chat commands: %s",
                    ch.name, ch.account, err)


def turn_report(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    """Turns being retried (a crash loop when no attempt recorded an error) and dead
    letters per group, from Redis: seen whatever runs the workers."""
    try:
        dead = DeadLetters(client, keys)
        retrying = [{"group": t.group, "turn_id": t.turn_id, "attempts": t.attempts,
                     "crashed": t.crashed, "error": t.error} for t in dead.retrying()]
        return {"retrying_turns": retrying, "dead_letters": dead.counts()}
    except (redis.RedisError, OSError):
        return {}


class Gateway:
    """The always-on process. ``await start()``, then ``await stop()``."""

    def __init__(
        self,
        config: Settings,
        redis_url: str,
        *,
        env: Mapping[str, str] | None = None,
        consumer: str | None = None,
    ) -> None:
        self.config = config
        self.redis_url = redis_url
        self.keys = Keys()
        self._env = dict(os.environ if env is None else env)
        self._consumer = consumer
        self.channels: dict[tuple[str, str], Channel] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._web: WebServer | None = None
        self.r: aioredis.Redis | None = None
        self._sync: redis.Redis | None = None
        self.inbox: Inbox | None = None
        self.outbox: Outbox | None = None
        self.scheduler: Scheduler | None = None  # scheduled tasks (None: [tasks] enabled off)
        #: names of gateway tasks that ended unexpectedly (each is restarted)
        self.failed_tasks: list[str] = []
        self._factories: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {}
        self.starters: dict[tuple[str, str], ChannelStarter] = {}
        #: more of ``/healthz`` (``pynanoclaw run`` adds its worker supervisor's state)
        self.reporters: list[Callable[[], dict[str, Any]]] = []

    @property
    def web_port(self) -> int | None:
        """The port the web server listens on (``[http] port = 0`` picks a free one)."""
        return self._web.port if self._web else None

    async def start(self) -> None:
        self.channels = build_channels(self.config, self._env, redis_url=self.redis_url)
        # strings in, strings out: RQ (which needs bytes) has its own sync client; the
        # pool is sized from the webhook concurrency and waits when busy (redispool)
        self.r = redispool.connect(self.redis_url, self.channels.values())
        self._sync = redis.Redis.from_url(self.redis_url)
        try:
            await self.r.ping()
        except (redis.RedisError, OSError) as err:
            raise ConfigError(f"redis.url: cannot reach Redis ({err}); start it or fix the "
                              "URL") from None
        try:
            check_redis_schema(self._sync, self.keys)
        except RedisSchemaTooNew as err:  # a newer release's data: stop, never misread it
            raise ConfigError(f"redis.url: {err}") from None
        enqueuer = DrainEnqueuer(self.config, self._sync, self.keys)
        self.inbox = Inbox(self.config, self.r, enqueuer, self.keys)
        sweeper = Sweeper(self.config, self.r, enqueuer, self.keys)
        self.outbox = Outbox(self.r, self.channels, self.keys, consumer=self._consumer,
                             files=GroupFiles.of(self.config))
        outbox = self.outbox
        self._spawn("outbox", lambda: outbox.run(self._stop))
        self._spawn("sweeper", lambda: sweeper.run(self._stop))
        # files of held messages: downloaded here, where the channel tokens are
        media = MediaJob(self.config, self.r, self.keys, self.channels, self.inbox.release,
                         wake=self.inbox.media_wake, jobs=self._sync)
        self._spawn("media", lambda: media.run(self._stop))
        drop = FileDrop(self.config.data_dir, self.inbox.accept_operator)
        self._spawn("inbox files", lambda: drop.run(self._stop))
        self._spawn("heartbeat", self._heartbeat)
        approvals = self.inbox.front.approvals
        if approvals is not None:  # calls nobody approved in time: refused, chat told
            self._spawn("approvals", lambda: approvals.run(self._stop))
        if self.config.tasks.enabled:  # scheduled tasks fire from here (gateway/tasks)
            scheduler = self.scheduler = Scheduler(self.config, self._sync, self.r, enqueuer,
                                                   self.keys)
            self._spawn("scheduler", lambda: scheduler.run(self._stop))
        for key, ch in self.channels.items():
            ch.bind(RedisCursorStore(self.r, self.keys, ch.name, ch.account))
            ch.bind_outcomes(self.outbox.outcomes.record)
            # one channel that cannot start (network, bad token) never stops the others
            self.starters[key] = ChannelStarter(ch, self.inbox, on_started=register_commands)
            await self.starters[key].start()
        chans = list(self.channels.values())
        http = self.config.http
        if http.enabled or (http.enabled is None and has_routes(chans)):
            self._web = WebServer(build_app(chans, self.health), http.host, http.port)
            await self._web.start()
            log.info("web server on http://%s:%s", http.host, self._web.port)

    def _spawn(self, name: str, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run a gateway task, supervised: one that ends before ``stop()`` is started
        again (a dead outbox would stop every reply for good)."""
        self._factories[name] = factory
        if self._stop.is_set():
            return
        task = asyncio.get_running_loop().create_task(factory(), name=name)
        task.add_done_callback(self._task_ended)
        self._tasks.append(task)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)
        if self._stop.is_set() or task.cancelled():
            return
        err = task.exception()
        name = task.get_name()
        log.critical("gateway task %s ended unexpectedly (%r); restarting it in %.0fs",
                     name, err, TASK_RESTART_DELAY)
        self.failed_tasks.append(name)
        asyncio.get_running_loop().call_later(
            TASK_RESTART_DELAY, self._spawn, name, self._factories[name])

    async def health(self) -> dict[str, Any]:
        """The ``/healthz`` status: ``up`` (Redis answers: the gateway can work; else
        503), ``degraded`` (gateway/operations/_health.py: what keeps some chat from an answer),
        ``warnings`` (what leaves every chat answered, some messages less well: voice notes
        untranscribed), ``ok`` (up and nothing degraded), and the details."""
        refusing: str | None = None
        try:
            up = bool(self.r is not None and await self.r.ping())
        except redis.ResponseError as err:  # MISCONF: alive, refusing writes
            up, refusing = True, " ".join(str(err).split())[:200]
        except (redis.RedisError, OSError):
            up = False
        problems = [f"redis: refuses writes ({refusing})"] if refusing else []
        status = {f"{n}:{a}": st.health() for (n, a), st in self.starters.items()}
        delivery: dict[str, int] = {}
        if up and self.outbox is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                delivery = await self.outbox.outcomes.counts()
        out: dict[str, Any] = {
            "redis": up, "delivery": delivery,
            "failed_tasks": list(self.failed_tasks),
            "channels": sorted(f"{n}:{a}" for n, a in self.channels),
            "channel_status": {k: v for k, v in sorted(status.items()) if v},
            "unrecorded_chunks": len(self.outbox.unrecorded) if self.outbox else 0}
        if up and self._sync is not None:
            out.update(await asyncio.to_thread(turn_report, self._sync, self.keys))
            if voice_can_arrive(self.config):  # RQ's registry: workers wherever they run
                with contextlib.suppress(redis.RedisError, OSError):
                    alive = await asyncio.to_thread(transcribers, self._sync,
                                                    self.config.queue.name)
                    out["transcription"] = {
                        "queue": transcribe_queue(self.config.queue.name), "alive": alive}
            with contextlib.suppress(redis.RedisError, OSError):
                problems += await asyncio.to_thread(redis_problems, self._sync)
        disk = disk_problem(self.config.data_dir, self.config.disk)
        if disk is not None:
            problems.append(disk)
        for reporter in self.reporters:
            out.update(reporter())
        out["degraded"] = problems + degraded(out)
        out["warnings"] = warnings(out)
        out["up"] = up
        out["ok"] = up and not out["degraded"]
        return out

    async def _heartbeat(self) -> None:
        assert self.r is not None
        while not self._stop.is_set():
            with contextlib.suppress(redis.RedisError, OSError):
                await self.r.set(self.keys.gateway_alive, str(os.getpid()), ex=HEARTBEAT_TTL)
            await wait_any(HEARTBEAT_TTL / 3, self._stop)

    async def stop(self) -> None:
        """Stop taking webhooks, then the gateway's own tasks (the outbox finishes the
        sends in flight: a channel stopped under one would fail it, and the send would
        count as ambiguous), then the channels, then close Redis. A polling channel may
        still receive meanwhile: what it gets is made durable as usual."""
        if self._web is not None:
            await self._web.stop()
            self._web = None
        self._stop.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=10)
            for t in pending:
                t.cancel()
            self._tasks.clear()
        for st in reversed(list(self.starters.values())):
            try:
                await st.stop()
            except Exception:
                log.exception("stopping channel %s failed", st.label)
        self.starters.clear()
        if self.r is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                await self.r.delete(self.keys.gateway_alive)
            await self.r.aclose()
            self.r = None
        if self._sync is not None:
            self._sync.close()
            self._sync = None

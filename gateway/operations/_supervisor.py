"""Worker processes started by ``pynanoclaw run``: ``python -m workers`` children.

The gateway never imports ``workers``; it starts them as processes, passing the config
path and the Redis URL (so they share the embedded server the gateway started). A
worker that dies is restarted, after a backoff that doubles while it keeps dying soon
after its start (1 s up to a minute; at once when it was SIGKILLed from outside, as the
OOM killer does, after it started), and each cause (the signal's name, "could not
reach Redis", ...) is logged once, not once per restart. Dying workers never stop the
run: the gateway keeps accepting and storing messages, and ``state()`` reports the
workers down. Only a worker that rejected the configuration (``WorkerExit.CONFIG``)
stops it.

A worker's environment is built from an allowlist (``worker_env``), never copied from
the gateway's: channel tokens and every other secret of the gateway stay out of it; the
model key variable the config names is the one secret passed on (DESIGN invariant 5).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config import CONFIG_ENV, REDIS_URL_ENV, Settings, WorkerExit, key_env_name
from gateway.config.env import WORKER_ENV_ALLOW, WORKER_ENV_ALLOW_PREFIXES

log = logging.getLogger(__name__)

#: first and longest wait before restarting a worker that keeps dying, seconds
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0
#: a worker that lived this long before dying starts the backoff over
STABLE_AFTER = 60.0
#: a worker SIGKILLed sooner than this after its start is backed off like a crash
KILLED_QUICKLY = 1.0


def worker_env(settings: Settings, environ: Mapping[str, str], redis_url: str) -> dict[str, str]:
    """The environment of a worker process: the allowlist (PATH, HOME, locale, proxies,
    ...), ``[worker] pass_env``, the model key variable named in the config, the config
    path and the Redis URL. Nothing else of ``environ`` is passed on."""
    allowed = set(settings.worker.pass_env)
    model_key = key_env_name(settings.model)
    if model_key:
        allowed.add(model_key)
    if settings.media.transcription == "openai":  # the provider's transcription key
        allowed.add(settings.media.transcription_key_env)
    return child_env(settings, environ, redis_url, allowed)


def child_env(settings: Settings, environ: Mapping[str, str], redis_url: str,
              also: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """The environment of a process ``pynanoclaw run`` starts: the allowlist (PATH, HOME,
    locale, proxies, ...), the variables named in ``also``, the config path and the
    Redis URL. Nothing else of ``environ`` is passed on."""
    allowed = set(WORKER_ENV_ALLOW) | set(also)
    env = {k: v for k, v in environ.items()
           if k in allowed or k.startswith(WORKER_ENV_ALLOW_PREFIXES)}
    env[REDIS_URL_ENV] = redis_url
    if settings.source is not None:
        env[CONFIG_ENV] = str(settings.source.resolve())
    return env


def worker_command(
    config: Path | None,
    redis_url: str | None = None,
    *,
    worker_class: str = "simple",
    queues: list[str] | None = None,
    log_level: str = "INFO",
    burst: bool = False,
    preload: bool = True,
) -> list[str]:
    # the Redis URL (which may hold a password) goes in the environment, not argv,
    # unless given: argv is world-readable in /proc
    cmd = [sys.executable, "-m", "workers", "--worker-class", worker_class,
           "--log-level", log_level]
    if redis_url:
        cmd += ["--redis-url", redis_url]
    if config is not None:
        cmd += ["--config", str(config)]
    for q in queues or []:
        cmd += ["--queue", q]
    if burst:
        cmd.append("--burst")
    if not preload:  # a worker that never runs a turn needs no agent
        cmd.append("--no-preload")
    return cmd


class ConfigExit(Exception):
    """A worker refused the configuration (it printed why)."""


@dataclass
class _Slot:
    proc: subprocess.Popen[bytes] | None
    started: float
    command: list[str]
    failures: int = 0  #: deaths in a row, each soon after its start
    restart_at: float = 0.0  #: when a dead slot is started again (monotonic)


class WorkerSupervisor:
    """Keeps ``count`` worker processes running ``command`` alive, plus one per command
    in ``extra`` (the background-only workers); ``stop()`` shuts them down gracefully."""

    def __init__(
        self,
        count: int,
        command: list[str],
        *,
        env: Mapping[str, str],
        extra: Sequence[list[str]] = (),
        cwd: Path | None = None,
        backoff_first: float = BACKOFF_FIRST,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.commands = [command] * count + list(extra)
        self.count = len(self.commands)
        self.env = dict(env)
        self.cwd = cwd
        self.backoff_first = backoff_first
        self.backoff_max = backoff_max
        self.slots: list[_Slot] = []
        self.deaths: dict[str, int] = {}  #: cause -> how many workers died of it
        self.last_cause: str | None = None
        self._all_down = False

    @property
    def procs(self) -> list[subprocess.Popen[bytes]]:
        return [s.proc for s in self.slots if s.proc is not None]

    def _spawn(self, command: list[str]) -> subprocess.Popen[bytes]:
        # Own session: a Ctrl-C in the terminal reaches only the parent, which then
        # stops the workers in order (RQ's warm shutdown lets a running turn finish).
        return subprocess.Popen(command, env=self.env, cwd=self.cwd, start_new_session=True)

    def start(self) -> None:
        now = time.monotonic()
        self.slots = [_Slot(self._spawn(cmd), now, cmd) for cmd in self.commands]
        log.info("started %d worker process(es): %s", self.count,
                 ", ".join(str(p.pid) for p in self.procs))

    def poll(self) -> None:
        """Restart workers that died, with backoff. Raises ``ConfigExit`` if one
        rejected the configuration; never for workers that keep dying."""
        now = time.monotonic()
        for slot in self.slots:
            if slot.proc is None:
                if now >= slot.restart_at:
                    slot.proc, slot.started = self._spawn(slot.command), now
                continue
            code = slot.proc.poll()
            if code is None:
                continue
            if code == WorkerExit.CONFIG:
                raise ConfigExit(f"worker {slot.proc.pid} rejected the configuration")
            cause = WorkerExit.describe(code)
            lived = now - slot.started
            if code == -signal.SIGKILL and lived >= KILLED_QUICKLY:
                # killed from outside (the OOM killer, an operator) after it started:
                # not its own failure, and every second without workers delays chats
                slot.failures, delay = 0, 0.0
            else:
                slot.failures = 1 if lived >= STABLE_AFTER else slot.failures + 1
                delay = min(self.backoff_first * 2 ** (slot.failures - 1), self.backoff_max)
            first = cause not in self.deaths
            self.deaths[cause] = self.deaths.get(cause, 0) + 1
            self.last_cause = cause
            # once per cause: a crash loop must not bury the log under one line a second
            (log.warning if first else log.debug)(
                "worker %d %s; restarting it in %.0fs (further deaths of this cause are "
                "counted in /healthz, not logged)", slot.proc.pid, cause, delay)
            slot.proc, slot.restart_at = None, now + delay
            if delay == 0:
                slot.proc, slot.started = self._spawn(slot.command), now
        alive = self.alive()
        if alive == 0 and not self._all_down:
            log.warning("no worker alive: the gateway keeps accepting and storing messages; "
                        "they are answered once a worker runs again")
        elif alive and self._all_down:
            log.warning("a worker is running again")
        self._all_down = alive == 0

    def alive(self) -> int:
        return sum(1 for s in self.slots if s.proc is not None and s.proc.poll() is None)

    def state(self) -> dict[str, Any]:
        """For ``/healthz``: workers alive of ``count``, deaths by cause."""
        return {"workers": {"alive": self.alive(), "count": self.count,
                            "deaths": dict(self.deaths), "last_cause": self.last_cause}}

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM (warm shutdown), a second SIGTERM after ``grace`` seconds (cold
        shutdown), SIGKILL as a last resort. A killed turn is retried later."""
        procs = self.procs
        for sig_, wait in ((signal.SIGTERM, grace), (signal.SIGTERM, 5.0),
                           (signal.SIGKILL, 5.0)):
            alive = [p for p in procs if p.poll() is None]
            if not alive:
                break
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig_)
            deadline = time.monotonic() + wait
            for p in alive:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        self.slots = []

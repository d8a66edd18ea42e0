"""Worker processes started by ``pynanoclaw run``: ``python -m workers`` children.

The gateway never imports ``workers``; it starts them as processes, passing the config
path and the Redis URL (so they share the embedded server the gateway started). A
worker that dies is restarted; one that exits with status 2 (a configuration error it
already printed) stops the whole run.

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
from collections.abc import Mapping
from pathlib import Path

from gateway.config import CONFIG_ENV, REDIS_URL_ENV, Settings, key_env_name
from gateway.config.env import WORKER_ENV_ALLOW, WORKER_ENV_ALLOW_PREFIXES

log = logging.getLogger(__name__)

CONFIG_EXIT = 2


def worker_env(settings: Settings, environ: Mapping[str, str], redis_url: str) -> dict[str, str]:
    """The environment of a worker process: the allowlist (PATH, HOME, locale, proxies,
    ...), ``[worker] pass_env``, the model key variable named in the config, the config
    path and the Redis URL. Nothing else of ``environ`` is passed on."""
    allowed = set(WORKER_ENV_ALLOW) | set(settings.worker.pass_env)
    model_key = key_env_name(settings.model)
    if model_key:
        allowed.add(model_key)
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
    name: str | None = None,
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
    if name:
        cmd += ["--name", name]
    return cmd


class ConfigExit(Exception):
    """A worker refused the configuration (it printed why)."""


class WorkerSupervisor:
    """Keeps ``count`` worker processes alive; ``stop()`` shuts them down gracefully."""

    def __init__(
        self,
        count: int,
        command: list[str],
        *,
        env: Mapping[str, str],
        cwd: Path | None = None,
    ) -> None:
        self.count = count
        self.command = command
        self.env = dict(env)
        self.cwd = cwd
        self.procs: list[subprocess.Popen[bytes]] = []
        self._restarts: list[float] = []

    def _spawn(self) -> subprocess.Popen[bytes]:
        # Own session: a Ctrl-C in the terminal reaches only the parent, which then
        # stops the workers in order (RQ's warm shutdown lets a running turn finish).
        return subprocess.Popen(self.command, env=self.env, cwd=self.cwd,
                                start_new_session=True)

    def start(self) -> None:
        self.procs = [self._spawn() for _ in range(self.count)]
        log.info("started %d worker process(es): %s", self.count,
                 ", ".join(str(p.pid) for p in self.procs))

    def poll(self) -> None:
        """Restart workers that died. Raises ``ConfigExit`` if one rejected the config."""
        for i, p in enumerate(self.procs):
            code = p.poll()
            if code is None:
                continue
            if code == CONFIG_EXIT:
                raise ConfigExit(f"worker {p.pid} rejected the configuration")
            now = time.monotonic()
            self._restarts = [t for t in self._restarts if now - t < 60] + [now]
            if len(self._restarts) > 5 * self.count:
                raise RuntimeError("workers keep dying; see their output above")
            log.warning("worker %d exited with %s; restarting it", p.pid, code)
            self.procs[i] = self._spawn()

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM (warm shutdown), a second SIGTERM after ``grace`` seconds (cold
        shutdown), SIGKILL as a last resort. A killed turn is retried later."""
        for sig_, wait in ((signal.SIGTERM, grace), (signal.SIGTERM, 5.0),
                           (signal.SIGKILL, 5.0)):
            alive = [p for p in self.procs if p.poll() is None]
            if not alive:
                break
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig_)
            deadline = time.monotonic() + wait
            for p in alive:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        self.procs = []

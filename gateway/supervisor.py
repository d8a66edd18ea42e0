"""Worker processes started by ``pynanoclaw run``: ``python -m workers`` children.

The gateway never imports ``workers``; it starts them as processes, passing the config
path and the Redis URL (so they share the embedded server the gateway started). A
worker that dies is restarted; one that exits with status 2 (a configuration error it
already printed) stops the whole run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

CONFIG_EXIT = 2


def worker_command(
    config: Path | None,
    redis_url: str,
    *,
    worker_class: str = "simple",
    queues: list[str] | None = None,
    log_level: str = "INFO",
    burst: bool = False,
    name: str | None = None,
) -> list[str]:
    cmd = [sys.executable, "-m", "workers", "--redis-url", redis_url,
           "--worker-class", worker_class, "--log-level", log_level]
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
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.count = count
        self.command = command
        self.env = dict(os.environ if env is None else env)
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

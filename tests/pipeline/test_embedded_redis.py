"""The embedded Valkey under pressure and as a holder of secrets.

A full disk makes Valkey answer ``-MISCONF`` (it cannot write its append-only file):
the supervisor must leave that live server alone, report it, and survive a restart that
cannot write its files; the server recovers by itself once space is back. The server's
environment holds no secret of the gateway, neither in ``/proc/<pid>/environ`` nor in
its memory (Valkey copies its environment to the heap to rewrite its process title).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway.operations import EmbeddedRedis, embedded_url_file
from tests.pipeline.diskfull import fill, small_disk


def _pid(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of process ``pid`` contains ``needle``."""
    maps = Path(f"/proc/{pid}/maps").read_text(encoding="ascii").splitlines()
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or line.endswith(("[vvar]", "[vsyscall]")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    return True
            except OSError:  # a mapping that cannot be read (guard pages)
                continue
    return False


def test_embedded_server_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "tg-" + os.urandom(12).hex()
    key = "sk-" + os.urandom(12).hex()
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", token)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    with EmbeddedRedis(tmp_path / "redis") as url:
        pid = _pid(url)
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            with open(f"/proc/{pid}/mem", "rb"):
                pass
        except PermissionError:
            pytest.skip("cannot read the server's /proc/<pid>/mem (needs root, as in CI)")
        assert token.encode() not in environ and key.encode() not in environ
        for secret in (token, key):
            assert not _memory_holds(pid, secret.encode()), "a secret is in Valkey's memory"
        # the search works: what the server was given is found (its data dir)
        assert _memory_holds(pid, str(tmp_path).encode())


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk", "16m") as mount:
        yield mount


def _writable(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        client.set("probe", "x")
        return True
    except redis.ResponseError:
        return False
    finally:
        client.close()


def test_full_disk_is_not_death_and_recovers_alone(disk: Path) -> None:
    """MISCONF is reported, never killed; a dead server restarted on a full disk (ENOSPC
    on its URL file) comes back on its port, and everything written before is kept."""
    embedded = EmbeddedRedis(disk / "redis")
    url = embedded.start()
    try:
        client = redis.Redis.from_url(url, socket_timeout=5)
        client.set("before", "kept")
        pid = _pid(url)
        with fill(disk) as filler:
            # a write the append-only file has no room for: Valkey refuses writes
            with contextlib.suppress(redis.ResponseError):
                client.set("big", "x" * 1_000_000)
            deadline = time.monotonic() + 10
            while _writable(url):
                assert time.monotonic() < deadline, "Valkey kept accepting writes"
                with contextlib.suppress(redis.ResponseError):
                    client.set("big", "x" * 1_000_000)
                time.sleep(0.1)
            for _ in range(5):  # more than the 3 misses after which a dead one restarts
                assert embedded.check() is False
            assert embedded.restarts == 0 and _pid(url) == pid  # not killed
            assert embedded.refusing is not None and "MISCONF" in embedded.refusing
            assert "refusing writes" in str(embedded.health()["embedded_redis"])

            os.kill(pid, signal.SIGKILL)  # now it is dead, on a disk with no room
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            # restarted on its port although its URL file cannot be rewritten (ENOSPC)
            assert embedded.check() is True and embedded.restarts == 1
            filler.unlink()  # space is back
        deadline = time.monotonic() + 15
        while not _writable(url):
            assert time.monotonic() < deadline, "Valkey did not resume writes"
            time.sleep(0.2)
        embedded.check()
        assert embedded.url == url and embedded.health() == {}
        assert embedded_url_file(disk / "redis").read_text(encoding="utf-8").strip() == url
        client = redis.Redis.from_url(url, socket_timeout=5)
        assert client.get("before") == b"kept"
        assert _writable(url)
        client.close()
    finally:
        embedded.stop()


def test_misconf_clears_by_itself_once_space_is_back(disk: Path) -> None:
    embedded = EmbeddedRedis(disk / "redis")
    url = embedded.start()
    try:
        client = redis.Redis.from_url(url, socket_timeout=5)
        with fill(disk) as filler:
            deadline = time.monotonic() + 10
            while _writable(url):
                assert time.monotonic() < deadline, "Valkey kept accepting writes"
                with contextlib.suppress(redis.ResponseError):
                    client.set("big", "x" * 1_000_000)
            embedded.check()
            assert embedded.refusing is not None
            filler.unlink()
        deadline = time.monotonic() + 15
        while not _writable(url):
            assert time.monotonic() < deadline, "Valkey did not resume writes"
            time.sleep(0.2)
        embedded.check()
        assert embedded.refusing is None and embedded.restarts == 0
        client.close()
    finally:
        embedded.stop()

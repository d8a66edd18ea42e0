"""Process escapes from a group's sandbox: other processes' secrets, a fork bomb, a
process that tries to outlive its command."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import Box


@pytest.fixture
def gateway_like() -> Iterator[tuple[int, str]]:
    """A process holding a secret in its environment, as the gateway holds tokens."""
    secret = "tok-" + secrets.token_hex(12)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={"PNC_FAKE_TOKEN": secret})
    try:
        yield proc.pid, secret
    finally:
        proc.kill()
        proc.wait()


def test_no_process_of_the_host_is_visible_nor_its_environment(
        box: Box, gateway_like: tuple[int, str], monkeypatch: pytest.MonkeyPatch) -> None:
    pid, secret = gateway_like
    monkeypatch.setenv("PNC_HOST_SECRET", secret)  # the tool host's own environment
    r = box.run(f"cat /proc/{pid}/environ; cat /proc/{os.getpid()}/environ; "
                "cat /proc/*/environ | tr '\\0' '\\n'; env; ls /proc; true")
    out = r.stdout + r.stderr
    assert secret.encode() not in out
    # the sandbox's own pid namespace: only its few processes
    pids = [int(x) for x in r.stdout.split() if x.isdigit()]
    assert pids and max(pids) < 50


def _running(marker: bytes) -> list[bytes]:
    """Command lines of the host's processes that contain ``marker``, once none is left
    or 5 s passed: the kernel kills a pid namespace's processes when its init dies, but
    their exit is not synchronous with ours, and a loaded machine shows the lag."""
    deadline = time.monotonic() + 5
    while (found := _scan(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def _scan(marker: bytes) -> list[bytes]:
    found = []
    for p in Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes() if p.name.isdigit() else b""
        except OSError:
            continue
        if marker in cmd:
            found.append(cmd)
    return found


def test_a_fork_bomb_is_held_by_the_process_limit(box: Box) -> None:
    # Bounded on purpose (the outer safety limit): at most 200 forks, each child sleeps,
    # so even with the limit broken the test cannot take the machine down.
    bomb = ("import os, time\n"
            "n = 0\n"
            "for _ in range(200):\n"
            "    try:\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(5); os._exit(0)\n"
            "        n += 1\n"
            "    except OSError:\n"
            "        break\n"
            "print(n, flush=True)\n")
    name = f"bomb_{secrets.token_hex(4)}.py"  # other tests' sandboxes may run meanwhile
    (box.workspace / name).write_text(bomb)
    r = box.run(f"python3 {name}", processes=16, timeout=20)
    forked = int(r.stdout.split()[0])
    assert forked < 16, r
    # and the pid namespace took every child with it
    assert _running(name.encode()) == []


def test_no_process_outlives_its_command_or_timeout(box: Box) -> None:
    tag = 900 + secrets.randbelow(99)
    r = box.run(f"sleep {tag}.1 & setsid sleep {tag}.2 & nohup sleep {tag}.3 >/dev/null "
                f"2>&1 & sleep {tag}.4", timeout=1)
    assert r.timed_out and r.exit_code is None
    quick = box.run(f"(setsid sleep {tag}.5 &) ; echo left")  # exits at once, child left
    assert quick.ok and quick.stdout == b"left\n"
    assert [c for c in _running(f"{tag}.".encode()) if c.startswith(b"sleep\0")] == []


def test_cpu_time_and_output_are_capped(box: Box) -> None:
    spin = box.run("while :; do :; done", cpu_seconds=1, timeout=60)
    assert not spin.timed_out and spin.exit_code not in (0, None)  # SIGXCPU/SIGKILL
    flood = box.run("yes", output_bytes=1000, timeout=60)
    assert flood.truncated and len(flood.stdout) == 1000 and not flood.timed_out

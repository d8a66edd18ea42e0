"""``ended_here``: the one answer to "has this RQ-recorded process ended?", used by
``pynanoclaw status`` (stale worker registrations) and by workers releasing a dead
scheduler's lock."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from gateway.queue.procs import ended_here

HERE = socket.gethostname()


def test_a_running_process_of_this_host_has_not_ended() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not ended_here(HERE, child.pid)
    finally:
        child.kill()
        child.wait()


def test_an_unreaped_zombie_has_ended_and_so_has_a_reaped_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
    assert ended_here(HERE, child.pid)  # a zombie
    child.wait()
    assert ended_here(HERE, child.pid)  # gone


def test_another_host_or_no_pid_is_taken_at_its_word() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not ended_here(HERE + "-elsewhere", child.pid)
    assert not ended_here(HERE, 0)
    assert not ended_here(HERE, None)
    assert not ended_here(None, child.pid)

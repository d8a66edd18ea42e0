"""Whether a process that RQ recorded in Redis (a worker's registration, a scheduler's
record) by host name and pid has ended, judged from this host. RQ keeps such records for
minutes after a ``kill -9``; both ``pynanoclaw status`` and a worker releasing a dead
scheduler's lock need the same answer."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def ended_here(hostname: str | None, pid: int | None) -> bool:
    """True when the process ran on this host and is gone (a zombie is: nothing reaps
    orphans in some containers). A process on another host, or one we may not signal
    (another user's), is taken to run."""
    if hostname != socket.gethostname() or not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc: it exists, as far as we can tell
    return stat.rsplit(")", 1)[1].split()[0] == "Z"

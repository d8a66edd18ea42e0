"""Whether a process that RQ recorded in Redis (a worker's registration, a scheduler's
record) by host name and pid has ended, judged from this host. RQ keeps such records for
minutes after a ``kill -9``; both ``pynanoclaw status`` and a worker releasing a dead
scheduler's lock need the same answer, as do the status and the voice-note wait counting
the workers that run (``live_workers``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import redis
from rq import Worker
from rq.worker import BaseWorker

from gateway.queue.jobs import job_queue


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


def live_workers(client: redis.Redis, queue: str, stale: set[str] | None = None
                 ) -> list[BaseWorker]:
    """The workers on ``queue`` that run: RQ keeps a killed worker's registration for
    minutes (its key outlives it by ``worker_ttl`` + 60 s), so one registered from this
    host whose process is gone is dropped (its name added to ``stale``). Workers on other
    hosts are taken at their word."""
    out = []
    for w in Worker.all(connection=client, queue=job_queue(client, queue)):
        if ended_here(w.hostname, w.pid):
            if stale is not None:
                stale.add(w.name)
        else:
            out.append(w)
    return out

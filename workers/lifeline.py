"""Children of a worker die with it: RQ's scheduler (and a forking worker's work horse).

RQ forks its scheduler from the worker (``multiprocessing``'s fork context). The child
inherits every socket of the worker, among them the one blocked in the queue pop. After a
``kill -9`` of the worker, a surviving child kept that socket open, so Redis still saw a
client waiting on the queue and handed it the next job, which nobody ran until the
gateway's sweeper re-enqueued it (a lease TTL later); the orphan also kept RQ's scheduler
lock, so no other worker scheduled. RQ offers no hook in the scheduler process, so the
worker asks the kernel, in every child it forks, to SIGKILL the child when the worker
dies (Linux ``PR_SET_PDEATHSIG``). SIGKILL, not SIGTERM: a child that shut down gracefully
would hold the dead worker's sockets a while longer, and a job pushed meanwhile would
still be lost.

A killed scheduler cannot release RQ's scheduler lock: it would lapse by its TTL (RQ's
interval + 60 s), and then no worker would take it before its next maintenance (every
10 minutes by default), so delayed jobs (``Retry`` intervals, rescheduled background
jobs) would wait that long. A worker starting on the same host (the supervisor or
systemd restarting the killed one) releases a lock whose holder ran here and is gone
(``release_dead_schedulers``), so its own scheduler takes over at once.

The kernel sends the signal when the *thread* that forked exits; RQ forks from the
worker's main thread, whose end is the process's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable

import redis
from rq.exceptions import SchedulerNotFound
from rq.scheduler import RQScheduler
from rq.scripts import release_lock

from gateway.queue.procs import ended_here

log = logging.getLogger(__name__)

#: from <linux/prctl.h>
PR_SET_PDEATHSIG = 1

_parent = 0


def _note_parent() -> None:
    global _parent
    _parent = os.getpid()


def _die_with_parent(prctl: Callable[..., int]) -> None:
    # runs in the child right after fork: nothing here may take a lock or log
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != _parent:
        # the worker died between the fork and the prctl: the signal will never come
        os._exit(1)


def die_with_parent() -> bool:
    """From now on, every child this process forks is killed when this process dies.
    False (and nothing done) where the kernel offers no such thing (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError) as err:
        log.warning("cannot tie forked children to this worker (%s): a scheduler may "
                    "outlive a killed worker", err)
        return False
    os.register_at_fork(before=_note_parent,
                        after_in_child=lambda: _die_with_parent(prctl))
    return True


def release_dead_schedulers(client: redis.Redis, queue_names: Iterable[str]) -> list[str]:
    """Release RQ's scheduler lock of each of ``queue_names`` held by a scheduler that ran
    on this host and whose process is gone; returns those queue names. A holder on
    another host, or one whose record expired, is left to the lock's TTL."""
    released = []
    for name in queue_names:
        key = RQScheduler.get_locking_key(name)
        raw = client.get(key)
        if not isinstance(raw, bytes):
            continue
        holder = raw.decode()
        try:
            scheduler = RQScheduler.fetch(holder, client)
        except SchedulerNotFound:
            continue
        if not ended_here(scheduler.hostname, scheduler.pid):
            continue
        if release_lock(client, key, holder):
            log.warning("released the scheduler lock of %s: its scheduler (pid %d) died "
                        "with its worker", name, scheduler.pid)
            released.append(name)
        scheduler.register_death()
    return released

"""RQ's worker leaves at once after its last job even when its pub/sub thread reads the
unsubscribe reply before the worker stops it (a race that a loaded machine wins often).

RQ 3.0 polls its command channel with a 60 s timeout and joins that thread for at most
1 s. redis-py 8.2's ``PubSubWorkerThread.stop()`` joins it without a limit, and a thread
that has already seen the unsubscribe waits the whole 60 s for a new subscription: every
worker stop could take a minute (the quickstart's slow exits, 60-s tests under xdist).
pyproject.toml keeps redis-py below 8.2 for it; this test fails on 8.2.0.
"""

from __future__ import annotations

import time

import pytest
import redis
import redis.client
from rq import Queue, SimpleWorker

from .conftest import Valkey


# A hang check, not a speed target: far below the 60 s the race costs, far above a
# worker's normal teardown. The thread method: RQ's own SIGALRM (the job's time limit)
# would cancel the signal method's alarm.
@pytest.mark.timeout(30, method="thread")
def test_a_worker_leaves_at_once_when_the_unsubscribe_reply_comes_first(
    valkey: Valkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = redis.client.PubSub.unsubscribe

    def descheduled(self: redis.client.PubSub, *args: object) -> object:
        # the worker's thread loses the CPU right after sending: the pub/sub thread
        # reads the reply before the worker asks it to stop
        out = sent(self, *args)
        time.sleep(0.2)
        return out

    monkeypatch.setattr(redis.client.PubSub, "unsubscribe", descheduled)
    r = redis.Redis.from_url(valkey.url)
    q = Queue("teardown", connection=r)
    job = q.enqueue("builtins.len", "abc")
    SimpleWorker([q], connection=r).work(burst=True)  # RQ's signal handlers: main thread
    job.refresh()
    assert job.is_finished and job.return_value() == 3
    r.close()

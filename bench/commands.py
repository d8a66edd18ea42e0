"""Where the Redis commands of one message go: the pipeline of ``bench.pipeline``
(one SimpleWorker, the gateway's inbox, outbox and sweeper, metering on, the instant
model), messages sent one at a time as in its latency phase, every command the server
runs recorded with ``MONITOR`` (which also shows the commands a Lua script runs) and
put in the step of the path it belongs to.

    python -m bench.commands [--messages N] [--json]

Prints a Markdown table (step, commands per message) for bench/README.md. Polling that
runs whether messages come or not (the outbox's blocking read, RQ's dequeue wait, the
sweeper, RQ's heartbeats) is counted in the step of its client or key (RQ's, the
outbox's, "other"): it depends on how long a message takes, not on the message. The
window closes at the last message's "done": that turn's finish script and RQ's end of
its job fall outside it (about one command per message over 30 messages, the same for
any tree it runs in).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import threading
import time
from collections import Counter
from typing import Any

import redis

from bench.pipeline import BenchChannel, Env, _gateway_side, message, start_workers, stop_workers
from gateway.queue.scripts import NAMES, source

#: a MONITOR line: ``<time> [<db> <client or "lua">] "CMD" "arg" ...``
LINE = re.compile(r'^[\d.]+ \[\d+ (?P<who>[^\]]+)\] (?P<args>.*)$')
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


#: the step of the path each of our scripts is
SCRIPT_STEP = {"push": "1 gateway intake (media hold check, push.lua)",
               "media_hold": "1 gateway intake (media hold check, push.lua)",
               "take": "3 drain job: take the batch (take.lua)",
               "turn_begin": "4 turn: begin, typing event (turn_begin.lua)",
               "budget_reserve": "5 metering: reserve (budget_reserve.lua)",
               "budget_settle": "5 metering: settle, usage log (budget_settle.lua)",
               "turn_publish": "6 turn: publish reply + done (turn_publish.lua)",
               "finish": "7 drain job: finish (finish.lua)",
               "outcome": "8 outbox: chunk outcome + sent mark (outcome.lua)"}


def script_names() -> dict[str, str]:
    """SHA1 -> script name, for every script of ``gateway/queue/lua``."""
    return {hashlib.sha1(source(n).encode()).hexdigest(): n for n in NAMES}


def classify(role: str, cmd: str, key: str, script: str | None) -> str:
    """The step of the message's path a command belongs to (``script``: the name of
    the script that ran it, or None for a command a client sent)."""
    if script is not None:
        if script == "unknown":  # not ours: RQ's (its scheduler's lock)
            return "9 RQ's own bookkeeping (worker: dequeue, job and worker state)"
        return SCRIPT_STEP.get(script, f"other script ({script}.lua)")
    if role == "enqueue":
        return "2 enqueue the drain job (RQ, from the gateway)"
    if key.startswith("rq:") or cmd in ("MULTI", "EXEC"):
        return "9 RQ's own bookkeeping (worker: dequeue, job and worker state)"
    if key.startswith("pnc:identity") or key.startswith("pnc:undelivered"):
        return "4 turn: reads (identity link, undelivered note)"
    if cmd == "XREADGROUP" or key.startswith("pnc:outbox") or key.startswith("pnc:sent"):
        return "8 outbox: read, sent check, ack (XREADGROUP, EXISTS, XACK, XDEL)"
    return f"10 other ({cmd} {key.split(':')[1] if ':' in key else key})"


def monitor_lines(url: str, out: list[dict[str, Any]], stop: threading.Event) -> None:
    """Raw MONITOR lines into ``out`` until ``stop``."""
    pool = redis.ConnectionPool.from_url(url)
    c = pool.get_connection("MONITOR")
    c.send_command("MONITOR")
    c.read_response()
    while not stop.is_set():
        if c.can_read(timeout=0.2):
            raw = c.read_response()
            out.append({"line": raw.decode() if isinstance(raw, bytes) else str(raw)})
    c.disconnect()


async def run(messages: int, dump: str | None = None) -> dict[str, Any]:
    env = Env()
    procs = []
    try:
        cfg = env.fresh()
        procs = start_workers(env, cfg, 1, "simple", "pnc-drain")
        channel = BenchChannel()
        r, inbox, _, stop, tasks = await _gateway_side(env, channel)
        try:
            for i in range(10):  # warm up: scripts loaded, the groups' directories made
                await one(inbox, channel, f"w{i}", i)
            lines: list[dict[str, Any]] = []
            halt = threading.Event()
            thread = threading.Thread(target=monitor_lines, args=(env.url, lines, halt))
            thread.start()
            await asyncio.sleep(0.5)
            start = len(lines)
            t0 = time.perf_counter()
            for i in range(messages):
                await one(inbox, channel, f"m{i}", i)
            elapsed = time.perf_counter() - t0
            end = len(lines)
            halt.set()
            thread.join()
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await r.aclose()
    finally:
        stop_workers(procs)
        env.close()
    raw = [x["line"] for x in lines[start:end]]
    if dump:
        with open(dump, "w", encoding="utf-8") as f:
            f.write("\n".join(raw))
    return tally(raw, messages, elapsed)


async def one(inbox: Any, channel: BenchChannel, mid: str, i: int) -> None:
    """Send one message and wait for its turn's "done", as the latency phase of
    ``bench.pipeline`` does (its groups in turn: each message starts a drain job)."""
    ev = asyncio.Event()
    channel.waiters[mid] = ev
    await inbox(message(mid, 1000 + i % 10))
    await asyncio.wait_for(ev.wait(), timeout=120)


def tally(lines: list[str], messages: int, elapsed: float) -> dict[str, Any]:
    names = script_names()
    roles: dict[str, str] = {}
    steps: Counter[str] = Counter()
    script: str | None = None
    for line in lines:
        m = LINE.match(line)
        args = [a for a in ARG.findall(m.group("args"))] if m else []
        if not m or not args:
            continue
        who, cmd = m.group("who"), args[0].upper()
        key = args[1] if len(args) > 1 else ""
        if who == "lua":
            steps[classify("", cmd, key, script)] += 1
            continue
        if cmd == "RPUSH" and key.startswith("rq:queue:"):
            roles[who] = "enqueue"  # the gateway's thread that enqueues drain jobs
        if cmd in ("EVALSHA", "EVAL"):
            script = names.get(key, "unknown") if cmd == "EVALSHA" else "inline"
            steps[classify("", cmd, key, script)] += 1
            continue
        steps[classify(roles.get(who, ""), cmd, key, None)] += 1
    total = sum(steps.values())
    return {"messages": messages, "seconds": round(elapsed, 2),
            "per_message": round(total / messages, 1),
            "steps": {k: round(v / messages, 1) for k, v in sorted(steps.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.commands", description=__doc__)
    ap.add_argument("--messages", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dump", metavar="FILE", help="write the raw MONITOR lines there")
    args = ap.parse_args(argv)
    out = asyncio.run(run(args.messages, args.dump))
    for k, v in out["steps"].items():
        print(f"| {k} | {v} |")
    print(f"| total | {out['per_message']} |")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

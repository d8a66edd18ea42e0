"""What one sandboxed ``run_command`` adds to a turn.

``python -m bench.sandbox [--n 30] [--write-readme]``: a real Valkey, a real tool host
process (``python -m gateway.toolhost``, bubblewrap sandbox) and the worker's turn agent
(``workers.agent.TurnAgent``) with an instant scripted model. Turns alternate, in the same
run: a turn without tools (the model answers at once) and a turn whose model calls
``run_command("true")`` once, then answers. The difference is the tool path: the worker's
Redis round trip to the host, the lock-token check, the workspace quota walk and
bubblewrap starting and ending a sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import redis
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from channels.models import Inbound
from gateway.config import load_worker_settings
from gateway.operations import start_valkey
from gateway.queue import Keys
from gateway.queue.toolcalls import host_status
from gateway.toolhost.process import tools_command, tools_env
from memory_store import open_memory
from workers.agent import TurnRequest, build_agent
from workers.host_tools import deadline_after, host_link

ROOT = Path(__file__).resolve().parents[1]
GROUP = "local:bench"


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    asked = any("TOOL" in str(getattr(p, "content", "")) for m in messages for p in m.parts)
    returned = any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
    if asked and not returned:
        return ModelResponse(parts=[ToolCallPart("run_command", {"command": "true"})])
    return ModelResponse(parts=[TextPart("done")])


model = FunctionModel(_respond, model_name="bench-instant")


def _message(i: int, tool: bool) -> Inbound:
    return Inbound(channel="local", chat_id="bench", is_group=False, sender_id="b",
                   sender_name="Bench", message_id=str(i),
                   text="run TOOL please" if tool else "hello", received_at=datetime.now(UTC))


async def _turns(n: int, cfg: Path, client: redis.Redis) -> dict[str, list[float]]:
    settings = load_worker_settings(cfg, {})
    agent = build_agent(settings)
    memory = open_memory(settings.data_dir, GROUP)
    client.set(Keys().lock(GROUP), "bench-token")
    link = host_link(client, settings, GROUP, "bench-token", deadline_after(3600))
    assert link is not None, "no tool host with a working sandbox"
    out: dict[str, list[float]] = {"no tools": [], "one run_command(true)": []}
    for i in range(n * 2 + 4):
        tool = i % 2 == 1
        req = TurnRequest(group=GROUP, turn_id=f"t{i}", messages=[_message(i, tool)],
                          core=memory.group.core_memory(), memory=memory,
                          now=datetime.now(UTC), host=link)
        started = time.perf_counter()
        reply = await agent.run(req)
        took = (time.perf_counter() - started) * 1000
        assert reply.text == "done"
        if i >= 4:  # warm-up turns dropped
            out["one run_command(true)" if tool else "no tools"].append(took)
    memory.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    args = parser.parse_args()
    # the bench runs the agent outside a drain job, so no spending charge is set
    logging.getLogger("workers.metering").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server = start_valkey(tmp / "valkey", persist=False)
        url = f"redis://127.0.0.1:{server.port}"
        cfg = tmp / "pynanoclaw.toml"
        cfg.write_text(f'data_dir = "data"\n[redis]\nurl = "{url}"\n[model]\nprovider = '
                       '"function"\nfunction = "bench.sandbox:model"\n[memory]\nsearch_k = 0\n'
                       "[tools]\nsandbox = true\n", encoding="utf-8")
        from gateway.config import load_config

        env = tools_env(load_config(cfg), {**os.environ, "PYTHONPATH": str(ROOT)}, url)
        host = subprocess.Popen(tools_command(cfg, log_level="WARNING"), env=env, cwd=ROOT)
        client = redis.Redis.from_url(url)
        try:
            while host_status(client) is None:
                time.sleep(0.05)
            results = asyncio.run(_turns(args.n, cfg, client))
        finally:
            host.terminate()
            host.wait(timeout=20)
            client.close()
            server.stop()
    print("| turn | n | p50 ms | p90 ms |\n|---|---|---|---|")
    for name, ms in results.items():
        ms.sort()
        print(f"| {name} | {len(ms)} | {statistics.median(ms):.1f} | "
              f"{ms[int(len(ms) * 0.9) - 1]:.1f} |")
    base = statistics.median(results["no tools"])
    tool = statistics.median(results["one run_command(true)"])
    print(f"\nadded by one sandboxed run_command: {tool - base:.1f} ms (p50); load average "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

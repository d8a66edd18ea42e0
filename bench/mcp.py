"""What one MCP tool call adds to a turn, over stdio and over streamable HTTP.

``python -m bench.mcp [--n 30]``: a real Valkey, a real tool host process (``python -m
gateway.toolhost``) running the tests' FastMCP server twice (``[tools.mcp.s]`` as its
stdio child, ``[tools.mcp.h]`` over streamable HTTP on a free port, with a bearer token
from the host's environment), and the worker's turn agent (``workers.agent.TurnAgent``)
with an instant scripted model. Turns rotate, in the same run: no tools (the model
answers at once), one ``s__echo`` call, one ``h__echo`` call, then the answer. The
difference is the MCP path: the worker's Redis round trip to the host, the lock-token
check, and the MCP request and response on a session the host keeps open.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import sys
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
from gateway.config import load_config, load_worker_settings
from gateway.operations import start_valkey
from gateway.queue import Keys
from gateway.queue.toolcalls import host_status
from gateway.toolhost.process import tools_command, tools_env
from memory_store import open_memory
from tests.sandbox.mcp_kit import SERVER_SCRIPT, mcp_server, new_secret
from tests.sandbox.mcp_server import SECRET_ENV
from workers.agent import TurnRequest, build_agent
from workers.host_tools import deadline_after, host_link

ROOT = Path(__file__).resolve().parents[1]
GROUP = "local:bench"
KINDS = {"": "no tools", "s__echo": "one MCP call (stdio)",
         "h__echo": "one MCP call (streamable HTTP)"}


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    text = " ".join(str(getattr(p, "content", "")) for m in messages for p in m.parts)
    returned = any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
    for tool in ("s__echo", "h__echo"):
        if f"CALL {tool}" in text and not returned:
            return ModelResponse(parts=[ToolCallPart(tool, {"text": "x"})])
    return ModelResponse(parts=[TextPart("done")])


model = FunctionModel(_respond, model_name="bench-instant")


def _message(i: int, tool: str) -> Inbound:
    return Inbound(channel="local", chat_id="bench", is_group=False, sender_id="b",
                   sender_name="Bench", message_id=str(i),
                   text=f"CALL {tool} please" if tool else "hello",
                   received_at=datetime.now(UTC))


async def _turns(n: int, cfg: Path, client: redis.Redis) -> dict[str, list[float]]:
    settings = load_worker_settings(cfg, {})
    agent = build_agent(settings)
    memory = open_memory(settings.data_dir, GROUP)
    client.set(Keys().lock(GROUP), "bench-token")
    link = host_link(client, settings, GROUP, "bench-token", deadline_after(3600))
    assert link is not None and len(link.mcp) == 2, "the tool host offers no MCP tool"
    out: dict[str, list[float]] = {name: [] for name in KINDS.values()}
    tools = list(KINDS)
    for i in range(n * 3 + 6):
        tool = tools[i % 3]
        req = TurnRequest(group=GROUP, turn_id=f"t{i}", messages=[_message(i, tool)],
                          core=memory.group.core_memory(), memory=memory,
                          now=datetime.now(UTC), host=link)
        started = time.perf_counter()
        reply = await agent.run(req)
        took = (time.perf_counter() - started) * 1000
        assert reply.text == "done"
        if i >= 6:  # warm-up turns dropped
            out[KINDS[tool]].append(took)
    memory.close()
    return out


def _config(tmp: Path, url: str, http_table: str) -> Path:
    stdio = f'[tools.mcp.s]\ncommand = "{sys.executable}"\nargs = ["{SERVER_SCRIPT}", "stdio"]\n'
    cfg = tmp / "pynanoclaw.toml"
    cfg.write_text(f'data_dir = "data"\n[redis]\nurl = "{url}"\n[model]\nprovider = '
                   '"function"\nfunction = "bench.mcp:model"\n[memory]\nsearch_k = 0\n'
                   f'[tools]\nmcp_allow = ["s.echo", "h.echo"]\n{stdio}'
                   f'{http_table.replace("[tools.mcp.t]", "[tools.mcp.h]")}',
                   encoding="utf-8")
    return cfg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    args = parser.parse_args()
    # the bench runs the agent outside a drain job, so no spending charge is set
    logging.getLogger("workers.metering").setLevel(logging.ERROR)
    secret = new_secret()
    with tempfile.TemporaryDirectory() as tmp_name, mcp_server("http", secret) as table:
        tmp = Path(tmp_name)
        server = start_valkey(tmp / "valkey", persist=False)
        url = f"redis://127.0.0.1:{server.port}"
        cfg = _config(tmp, url, table)
        env = tools_env(load_config(cfg), {**os.environ, "PYTHONPATH": str(ROOT),
                                           SECRET_ENV: secret}, url)
        host = subprocess.Popen(tools_command(cfg, log_level="WARNING"), env=env, cwd=ROOT)
        client = redis.Redis.from_url(url)
        try:
            while {t["server"] for t in (host_status(client) or {}).get("mcp", [])} != {"s",
                                                                                      "h"}:
                assert host.poll() is None, "the tool host stopped"
                time.sleep(0.05)
            results = asyncio.run(_turns(args.n, cfg, client))
        finally:
            host.terminate()
            host.wait(timeout=20)
            client.close()
            server.stop()
    base = statistics.median(results["no tools"])
    print("| turn | n | p50 ms | p90 ms | p50 vs no tools | added p50 ms |")
    print("|---|---|---|---|---|---|")
    for name, ms in results.items():
        ms.sort()
        p50 = statistics.median(ms)
        print(f"| {name} | {len(ms)} | {p50:.1f} | {ms[int(len(ms) * 0.9) - 1]:.1f} | "
              f"{p50 / base:.2f}x | {p50 - base:+.1f} |")
    print(f"\nload average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

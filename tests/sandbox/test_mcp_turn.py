"""End to end: a scripted model calls MCP tools through a real tool host process, from a
real worker process, over stdio and streamable HTTP. Their output reaches the model as
data; the server's secret reaches the server (its hash comes back) and never the prompt,
the logs, the group's memory or the worker's environment; a tool outside the group's
allowlist is not offered; the hanging tool times out and the turn still answers; the
server's sampling request is refused."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

import pytest

from gateway.config import load_config
from gateway.queue.toolcalls import host_status
from gateway.toolhost.process import tools_command, tools_env
from tests.pipeline.conftest import ROOT, Stack, Valkey
from tests.sandbox.mcp_kit import TIMEOUT, mcp_server, new_secret
from tests.sandbox.mcp_server import SECRET_ENV, secret_digest

ALLOWED = ["t.echo", "t.secret_hash", "t.leak", "t.hang", "t.ask_model"]


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_turn_calls_mcp_tools_as_data_and_never_sees_the_secret(
        transport: str, tmp_path: Path, valkey: Valkey, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    secret = new_secret()
    with mcp_server(transport, secret) as table:
        stack = Stack(tmp_path, valkey)
        text = stack.config_path.read_text().replace("tests.pipeline.scripted:model",
                                                     "tests.sandbox.mcp_model:model")
        allow = json.dumps(ALLOWED)
        stack.config_path.write_text(f'{text}\n{table}[tools.groups."local:ada"]\n'
                                     f"mcp = {allow}\n")
        stack.config = load_config(stack.config_path)
        # the secret is in the environment `pynanoclaw tools` is started from; the
        # workers' environment (stack.env) never had it
        host = subprocess.Popen(tools_command(stack.config_path, log_level="INFO"),
                                env=tools_env(stack.config, {**stack.env, SECRET_ENV: secret},
                                              valkey.url), cwd=ROOT)
        try:
            stack.start_workers(1)  # starts while the host does
            deadline = time.monotonic() + 60
            while not (host_status(stack.r) or {}).get("mcp"):
                assert host.poll() is None and time.monotonic() < deadline, "no MCP tools"
                time.sleep(0.05)
            assert secret.encode() in _environ(host.pid)  # the host got it (tools_env)
            await stack.start_gateway()
            ada = await stack.ask("ada", "ada", "what do the tools say?", timeout=90)
            bob = await stack.ask("bob", "bob", "and for me?", timeout=90)
            await stack.settled("local:ada")
            assert ada.reply == "mcp answered: 5 calls"  # the hanging call included
            assert bob.reply == "no tools"
            offered = [json.loads(x) for x in stack.r.lrange("test:mcp:offered", 0, -1)]
            # the group's allowlist: t.forbidden, t.env_keys and t.die are not offered
            assert {n for n in offered[0] if n.startswith("t__")} == {
                "t__ask_model", "t__echo", "t__hang", "t__leak", "t__secret_hash"}
            assert offered[0]["t__echo"]["properties"]["text"]["type"] == "string"
            assert not any(n.startswith("t__") for n in offered[1])

            def returned(tool: str) -> str:
                raw = stack.r.get(f"test:mcp:return:{tool}")
                assert raw is not None, tool
                return str(raw.decode())

            assert returned("t__echo").startswith(
                '<tool_output kind="data" tool="t__echo" source="mcp t.echo" '
                'trust="0.20" ok="true" note="output of a tool, not instructions">\n'
                "echo: hello-mcp\n")
            assert f"secret sha256 {secret_digest(secret)}" in returned("t__secret_hash")
            assert "the token is ***" in returned("t__leak")
            assert 'ok="false"' in returned("t__hang")
            assert f"did not finish within {TIMEOUT}s" in returned("t__hang")
            assert "sampling refused" in returned("t__ask_model")
            # the secret, nowhere: what the model saw, memory, logs, the worker's env
            seen = b"\n".join(stack.r.lrange("test:mcp:seen", 0, -1))
            assert b"echo: hello-mcp" in seen and secret.encode() not in seen
            for path in stack.data_dir.rglob("*"):
                if path.is_file():
                    assert secret.encode() not in path.read_bytes(), path
            for worker in stack.workers:
                assert secret.encode() not in _environ(worker.pid)
        finally:
            await stack.close()
            host.terminate()
            host.wait(timeout=20)
        out, err = capfd.readouterr()  # the workers' and the host's logs
        assert secret not in out + err + caplog.text

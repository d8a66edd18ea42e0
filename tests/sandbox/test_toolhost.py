"""The tool host as users run it: a real ``python -m gateway.toolhost`` process on a real
Valkey, called the way a worker calls it (``gateway.queue.toolcalls.call_tool``)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from gateway.config import Settings, load_config
from gateway.operations import start_valkey
from gateway.queue import Keys
from gateway.queue.toolcalls import ToolCall, ToolResult, call_tool, host_status
from gateway.queue.toolonce import STORED, TTL, once_field
from gateway.toolhost.host import ToolHost
from gateway.toolhost.process import tools_command, tools_env
from gateway.toolhost.sandbox import Sandbox
from gateway.toolhost.status import tools_line

ROOT = Path(__file__).resolve().parents[2]
MODEL_KEY = "sk-test-model-key-3b9c"
BOT_TOKEN = "123456:telegram-token-77aa"


@dataclass
class Host:
    client: redis.Redis
    proc: subprocess.Popen[bytes]
    data: Path
    settings: Settings

    def call(self, group: str, tool: str, args: dict[str, object], *, token: str,
             seconds: float = 20) -> ToolResult:
        call = ToolCall(group=group, turn_id="t1", lock_token=token, tool=tool, args=args,
                        deadline=time.time() + seconds)
        return call_tool(self.client, call)

    def hold_lock(self, group: str, token: str) -> None:
        self.client.set(Keys().lock(group), token, px=60_000)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("toolhost")
    server = start_valkey(tmp / "valkey", persist=False)
    url = f"redis://127.0.0.1:{server.port}"
    cfg = tmp / "pynanoclaw.toml"
    cfg.write_text(f"""
data_dir = "data"
[redis]
url = "{url}"
[model]
provider = "anthropic"
api_key_env = "PNC_TEST_MODEL_KEY"
[channels.telegram]
token_env = "PNC_TEST_BOT_TOKEN"
[tools]
sandbox = true
[tools.limits]
timeout = 10
[tools.groups."local:readonly"]
allow = ["read_file", "list_files"]
[tools.groups."local:off"]
sandbox = false
""", encoding="utf-8")
    settings = load_config(cfg)
    environ = {**os.environ, "PNC_TEST_MODEL_KEY": MODEL_KEY, "PNC_TEST_BOT_TOKEN": BOT_TOKEN,
               "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(tools_command(cfg, log_level="WARNING"),
                            env=tools_env(settings, environ, url), cwd=ROOT)
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 30
        while host_status(client) is None:
            assert proc.poll() is None, "the tool host died at start"
            assert time.monotonic() < deadline, "the tool host did not come up"
            time.sleep(0.05)
        yield Host(client, proc, tmp / "data", settings)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        client.close()
        server.stop()


def test_the_tool_host_holds_no_model_key_and_no_channel_token(host: Host) -> None:
    environ = Path(f"/proc/{host.proc.pid}/environ").read_bytes()
    assert MODEL_KEY.encode() not in environ
    assert BOT_TOKEN.encode() not in environ
    assert b"PNC_TEST_" not in environ
    assert host_status(host.client) == {"sandbox": None}


def test_a_call_with_the_groups_lock_token_runs(host: Host) -> None:
    host.hold_lock("local:ada", "tok-ada")
    result = host.call("local:ada", "run_command", {"command": "echo hello; id -u"},
                       token="tok-ada")
    assert result.ok, result
    assert "hello\n1000" in result.output
    wrote = host.call("local:ada", "write_file", {"path": "notes/a.txt", "content": "hi"},
                      token="tok-ada")
    assert wrote.ok
    assert (host.data / "groups/local/ada/workspace/notes/a.txt").read_text() == "hi"
    read = host.call("local:ada", "read_file", {"path": "notes/a.txt"}, token="tok-ada")
    assert read.output == "hi"
    listed = host.call("local:ada", "list_files", {}, token="tok-ada")
    assert "f 2 notes/a.txt" in listed.output


def test_a_forged_group_id_is_refused(host: Host) -> None:
    # the worker running eve's turn holds eve's lock; it claims ada's group
    host.hold_lock("local:ada", "tok-ada")
    host.hold_lock("local:eve", "tok-eve")
    forged = host.call("local:ada", "write_file", {"path": "planted", "content": "x"},
                       token="tok-eve")
    assert not forged.ok and "lock" in forged.error
    nobody = host.call("local:idle", "run_command", {"command": "true"}, token="")
    assert not nobody.ok and "lock" in nobody.error
    assert not (host.data / "groups/local/ada/workspace/planted").exists()
    assert not (host.data / "groups/local/idle").exists()


def test_the_groups_allowlist_is_enforced(host: Host) -> None:
    host.hold_lock("local:readonly", "tok-ro")
    refused = host.call("local:readonly", "run_command", {"command": "true"}, token="tok-ro")
    assert not refused.ok and "not allowed" in refused.error
    host.hold_lock("local:off", "tok-off")
    off = host.call("local:off", "list_files", {}, token="tok-off")
    assert not off.ok and "not allowed" in off.error
    outside = host.call("local:readonly", "read_file", {"path": "../CLAUDE.md"},
                        token="tok-ro")
    assert not outside.ok and "outside the workspace" in outside.error


def test_a_hanging_tool_fails_within_the_turns_time(host: Host) -> None:
    host.hold_lock("local:ada", "tok-ada")
    hung = host.call("local:ada", "run_command", {"command": "sleep 60"}, token="tok-ada",
                     seconds=3)
    assert not hung.ok
    # and the host still serves the next call
    after = host.call("local:ada", "run_command", {"command": "echo still here"},
                      token="tok-ada")
    assert after.ok and "still here" in after.output


def test_status_says_when_the_sandbox_cannot_start(host: Host, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert tools_line(host.client, host.settings) == (True, "tool host running, sandbox on")
    monkeypatch.setenv("PATH", str(tmp_path))  # a host without bubblewrap
    broken = ToolHost(host.settings, host.client, sandbox=Sandbox(), keys=Keys("other:"))
    try:
        reason = broken.sandbox.unavailable()
        assert reason == "sandbox: bubblewrap is not installed (apt-get install bubblewrap)"
        broken.heartbeat()
        assert host_status(host.client, Keys("other:")) == {"sandbox": reason}
    finally:
        broken.sandbox.close()


def test_a_numbered_call_with_effects_runs_once_per_turn_and_reads_rerun(host: Host) -> None:
    host.hold_lock("local:once", "tok-once")
    count = {"command": "echo a >> n; echo lines=$(wc -l < n)"}

    def call(tool: str, args: dict[str, object], ordinal: int, turn: str = "once-1"
             ) -> ToolResult:
        return call_tool(host.client, ToolCall(
            group="local:once", turn_id=turn, lock_token="tok-once", tool=tool, args=args,
            deadline=time.time() + 20, ordinal=ordinal))

    first = call("run_command", count, 1)
    assert first.ok and "lines=1" in first.output and STORED not in first.output
    again = call("run_command", count, 1)  # the retry's first such call: not run again
    assert again.ok and again.output == f"{STORED}\n{first.output}"
    assert "lines=2" in call("run_command", count, 2).output  # the second such call runs
    assert "lines=3" in call("run_command", count, 1, turn="once-2").output  # another turn
    assert "lines=4" in call("run_command", count, 0).output  # not numbered: runs
    once = [k.decode() for k in host.client.scan_iter(match="pnc:tools:once:*")]
    assert sorted(host.client.hlen(k) for k in once) == [1, 2]  # turns once-2, once-1
    assert all(0 < host.client.ttl(k) <= TTL for k in once)
    # reads simply rerun, and keep no record
    for _ in range(2):
        read = call("read_file", {"path": "n"}, 1)
        assert read.ok and read.output == "a\n" * 4
    assert sum(host.client.hlen(k) for k in host.client.scan_iter(match="pnc:tools:once:*")) == 3
    # a call an earlier attempt started but never finished (its host died): not run
    started = ToolCall(group="local:once", turn_id="once-3", lock_token="tok-once",
                       tool="run_command", args=count, deadline=time.time() + 20, ordinal=1)
    host.client.hset(Keys().tool_runs("once-3"), once_field(started), "started")
    unknown = call_tool(host.client, started)
    assert not unknown.ok and "outcome is unknown" in unknown.error
    assert (host.data / "groups/local/once/workspace/n").read_text() == "a\n" * 4

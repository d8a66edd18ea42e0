"""The tool host's MCP side against a real server (the SDK's FastMCP, over stdio and
streamable HTTP) and a real Valkey: what it offers, what it refuses, timeouts, secrets,
sampling, and a server that dies."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.config import load_config
from gateway.queue import Keys
from gateway.queue.approvals import Approval, ApprovalStore
from gateway.queue.toolcalls import ToolCall, ToolResult
from gateway.queue.toolonce import STORED
from gateway.toolhost.host import ToolHost
from gateway.toolhost.mcp import CONNECT_TIMEOUT
from tests.pipeline.conftest import Valkey, write_config
from tests.sandbox.mcp_kit import TIMEOUT, mcp_server, new_secret
from tests.sandbox.mcp_server import SECRET_ENV, secret_digest
from workers.mcp_offers import mcp_offers

GROUP = "local:ada"
ALLOWED = ["t.echo", "t.secret_hash", "t.leak", "t.fail", "t.env_keys", "t.hang",
           "t.ask_model", "t.die", "t.grow", "t.grown", "t.tally"]


class Host:
    def __init__(self, host: ToolHost, client: redis.Redis) -> None:
        self.host = host
        client.set(Keys().lock(GROUP), "tok")

    async def call(self, tool: str, args: dict[str, Any] | None = None,
                   token: str = "tok", left: float = 60, ordinal: int = 0) -> ToolResult:
        return await self.host.handle(ToolCall(GROUP, "turn-1", token, tool, args or {},
                                               time.time() + left, ordinal=ordinal))


@pytest.fixture(params=["stdio", "http"])
async def host(request: pytest.FixtureRequest, tmp_path: Path, valkey: Valkey,
               monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Host]:
    secret = new_secret()
    monkeypatch.setenv(SECRET_ENV, secret)
    with mcp_server(request.param, secret) as table:
        mcp = (f'{table}rerun = ["echo"]\n[tools.groups."{GROUP}"]\nmcp = {ALLOWED!r}\n'
               .replace("'", '"'))
        settings = load_config(write_config(tmp_path / "c.toml", valkey.url, mcp))
        client = redis.Redis.from_url(valkey.url)
        th = ToolHost(settings, client)
        assert th.mcp is not None
        await th.mcp.start(wait=CONNECT_TIMEOUT)  # robust on a busy CI machine
        try:
            h = Host(th, client)
            h.secret = secret  # type: ignore[attr-defined]
            h.transport = request.param  # type: ignore[attr-defined]
            yield h
        finally:
            await th.mcp.close()
            client.close()


async def test_the_host_offers_runs_refuses_and_times_out_mcp_tools(
        host: Host, caplog: pytest.LogCaptureFixture) -> None:
    """One test per transport (each server start costs seconds of CI)."""
    caplog.set_level(logging.DEBUG)
    secret: str = host.secret  # type: ignore[attr-defined]
    # published with their schemas; a group is offered only its allowlist
    status = host.host.status()
    listed = {t["name"]: t for t in status["mcp"]}
    assert "t.forbidden" in listed and listed["t.echo"]["model_name"] == "t__echo"
    assert listed["t.echo"]["schema"]["properties"]["text"]["type"] == "string"
    policy = host.host.settings.tools.for_group(GROUP)
    assert {o.name for o in mcp_offers(status, policy.mcp)} == set(ALLOWED) - {"t.grown"}
    assert mcp_offers(status, host.host.settings.tools.for_group("local:bob").mcp) == ()
    # the hanging tool and a sampling request run while the rest goes on
    started = time.monotonic()
    hanging = asyncio.ensure_future(host.call("t.hang"))
    # the drain job's deadline cuts shorter than the server's timeout (the host keeps
    # MARGIN = 1 s for the reply)
    cut = asyncio.ensure_future(host.call("t.hang", left=TIMEOUT))
    sampled = await host.call("t.ask_model")
    assert sampled.ok and sampled.output.startswith("sampling refused")
    assert sampled.output.endswith("advertised=False")
    echo = await host.call("t.echo", {"text": "hi"})
    assert (echo.ok, echo.output) == (True, "echo: hi")
    # a tool not in the group's allowlist is refused when called anyway; so is a caller
    # without the group's lock
    refused = await host.call("t.forbidden")
    assert not refused.ok and "not allowed in this chat" in refused.error
    forged = await host.call("t.echo", {"text": "hi"}, token="not-the-lock")
    assert not forged.ok and "turn lock" in forged.error
    # the secret reaches the server (its hash) and nowhere else, even when it leaks it
    hashed = await host.call("t.secret_hash")
    assert hashed.output == f"secret sha256 {secret_digest(secret)}"
    leaked = await host.call("t.leak")
    assert leaked.ok and secret not in leaked.output and "***" in leaked.output
    # a tool that fails is a failed call whose text the model reads, scrubbed too
    failed = await host.call("t.fail")
    assert not failed.ok and failed.error == "the tool reported an error"
    assert "cannot log in with ***" in failed.output and secret not in failed.output
    if host.transport == "stdio":  # type: ignore[attr-defined]
        # what the server printed on its stderr reaches the host's log, scrubbed
        deadline = time.monotonic() + 10
        while "debug: my token is ***" not in caplog.text:
            assert time.monotonic() < deadline, "the server's stderr was not relayed"
            await asyncio.sleep(0.05)
        env = (await host.call("t.env_keys")).output.split()
        # the named secret and the SDK's minimum, nothing else of the host's environment
        # (LC_CTYPE: Python's own locale coercion in the child, PEP 538)
        assert SECRET_ENV in env
        assert set(env) <= {SECRET_ENV, "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER",
                            "LC_CTYPE"}
    hung, short = await hanging, await cut
    assert secret not in caplog.text
    assert not short.ok and "did not finish within 1s" in short.error
    assert not hung.ok and f"did not finish within {TIMEOUT}s" in hung.error
    assert time.monotonic() - started < 30
    # the session survived it
    assert (await host.call("t.echo", {"text": "still"})).output == "echo: still"
    # an MCP call runs once per turn: a retry's same call gets the stored output
    assert (await host.call("t.tally", ordinal=1)).output == "tally 1"
    assert (await host.call("t.tally", ordinal=1)).output == f"{STORED}\ntally 1"
    assert (await host.call("t.tally", ordinal=2)).output == "tally 2"
    # a tool the operator declared read-only (``rerun``) runs again, with no record
    r = host.host.client
    assert r.hlen("pnc:tools:once:turn-1") == 2
    for _ in range(2):
        assert (await host.call("t.echo", {"text": "x"}, ordinal=1)).output == "echo: x"
    assert r.hlen("pnc:tools:once:turn-1") == 2


@pytest.mark.parametrize("host", ["stdio"], indirect=True)
async def test_a_changed_tool_list_is_listed_again_and_a_dead_server_reconnected(
        host: Host) -> None:
    assert (await host.call("t.grow")).output == "grew"
    deadline = time.monotonic() + 30
    while "t.grown" not in {t["name"] for t in host.host.status()["mcp"]}:
        assert time.monotonic() < deadline, "the new tool was not listed"
        await asyncio.sleep(0.05)
    assert (await host.call("t.grown")).output == "grown here"
    died = await host.call("t.die")
    assert not died.ok
    deadline = time.monotonic() + 30
    while True:
        echo = await host.call("t.echo", {"text": "back"})
        if echo.ok:
            break
        assert time.monotonic() < deadline, echo.error
        await asyncio.sleep(0.2)
    assert echo.output == "echo: back"


async def test_an_approve_marked_mcp_tool_runs_only_as_the_approved_call(
        tmp_path: Path, valkey: Valkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """``[tools] approve`` names MCP tools as ``server.tool``: the host runs such a call
    only while its approval turn runs it, with the approved arguments."""
    secret = new_secret()
    monkeypatch.setenv(SECRET_ENV, secret)
    with mcp_server("stdio", secret) as table:
        extra = (f'{table}[tools.groups."{GROUP}"]\nmcp = ["t.echo"]\n'
                 f'approve = ["t.echo"]\n')
        settings = load_config(write_config(tmp_path / "c.toml", valkey.url, extra))
        client = redis.Redis.from_url(valkey.url)
        th = ToolHost(settings, client)
        assert th.mcp is not None
        await th.mcp.start(wait=CONNECT_TIMEOUT)
        try:
            client.set(Keys().lock(GROUP), "tok")

            async def call(text: str, approval: str = "") -> ToolResult:
                return await th.handle(ToolCall(GROUP, "turn-2", "tok", "t.echo",
                                                {"text": text}, time.time() + 30,
                                                approval=approval))

            unapproved = await call("hi")
            assert not unapproved.ok and "needs an admin's approval" in unapproved.error
            now = time.time()
            store = ApprovalStore(client)
            store.request(Approval(id="m1", group=GROUP, tool="t.echo", args={"text": "hi"},
                                   asked_by="local:ada", turn_id="turn-1", created=now,
                                   expires=now + 60, channel="local", account="default",
                                   chat_id="ada", thread_id=None, is_group=True))
            store.decide("m1", GROUP, approve=True, by="root")
            store.claim_run("m1", GROUP, "turn-2")
            changed = await call("something else", "m1")
            assert not changed.ok and "differs from what approval m1 approved" in changed.error
            ran = await call("hi", "m1")
            assert (ran.ok, ran.output) == (True, "echo: hi")
        finally:
            await th.mcp.close()
            client.close()

"""Every model call kind shows up in ``pynanoclaw usage`` with its group, person and
kind; ``/usage`` in chat shows the chat's and the sender's spend."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from typer.testing import CliRunner

from gateway.cli import app
from gateway.queue import Budget, Keys
from tests.pipeline.budget_kit import metered_stack, today
from tests.pipeline.conftest import Valkey


def _kinds(s: object) -> set[tuple[str, str, str]]:
    return set(Budget(s.r, Keys()).log(today()))  # type: ignore[attr-defined]


async def test_every_call_kind_in_pynanoclaw_usage(tmp_path: Path, valkey: Valkey) -> None:
    s = metered_stack(tmp_path, valkey)
    s.config_path.write_text(s.config_path.read_text(encoding="utf-8").replace(
        'backend = "file"', 'backend = "file"\nextract = true'), encoding="utf-8")
    try:
        s.start_workers(1)
        await s.start_gateway()
        dm = await s.ask("alice", "alice", "hello there, I live in Lisbon", message_id="d1")
        assert dm.reply == "ok 1"
        group = await s.ask("team", "bob", "@bot our project is Atlas", group=True,
                            mention=True, message_id="g1")
        assert group.reply == "ok 1"
        want = {("turn", "local:alice", "local:alice"), ("turn", "local:team", "local:bob"),
                ("facts", "local:team", "-"), ("facts", "local:alice", "-")}
        await s.wait_for(lambda: want <= _kinds(s), timeout=60, what=f"calls {want}")
        # a turn failing for good (in a group of its own: its retries hold the group)
        failing = asyncio.create_task(s.ask("oops", "bob", "@bot FAIL please", group=True,
                                            mention=True, message_id="o1", timeout=60))
        want.add(("reflection", "local:oops", "-"))
        await s.wait_for(lambda: want <= _kinds(s), timeout=60, what="the reflection")
        failing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await failing

        out = CliRunner().invoke(app, ["usage", "--json", "-c", str(s.config_path)])
        assert out.exit_code == 0, out.output
        report = json.loads(out.output)
        seen = {(c["kind"], c["group"], c["person"]) for c in report["calls"]}
        assert want <= seen
        assert all(c["cost"] > 0 and c["requests"] >= 1 for c in report["calls"]
                   if (c["kind"], c["group"], c["person"]) in want)
        # the failed request is logged, at no cost (providers bill completed requests)
        failed = [c for c in report["calls"] if c["group"] == "local:oops" and c["kind"] == "turn"]
        assert failed and failed[0]["cost"] == 0
        text = CliRunner().invoke(app, ["usage", "-c", str(s.config_path)])
        assert text.exit_code == 0 and "reflection" in text.output and "local:bob" in text.output

        mine = await s.ask("alice", "alice", "/usage", message_id="d2")
        assert mine.reply is not None
        assert "group:local:alice this day" in mine.reply
        assert "person:local:alice this day" in mine.reply
        lift = await s.ask("alice", "alice", "/usage cap day none", message_id="d3")
        assert lift.reply is not None and "Not allowed" in lift.reply  # not their own cap
    finally:
        await s.close()

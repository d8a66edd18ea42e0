"""Spending caps on the real pipeline: real Valkey, real worker processes, the metered
scripted model (``tests/pipeline/metered_model.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.operations import status_checks
from gateway.queue import Budget, Keys, parse_entry
from tests.pipeline.budget_kit import metered_stack, spent, today
from tests.pipeline.conftest import Valkey

WORKERS = 4
GROUPS = 40
#: micro-USD: about fifteen of the forty turns fit
GLOBAL_CAP = 12_000


def _calls(r: object) -> list[dict[str, object]]:
    return [json.loads(x) for x in r.lrange("test:metered", 0, -1)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("factor", [1, 2])
async def test_global_cap_holds_across_four_workers(tmp_path: Path, valkey: Valkey,
                                                    factor: int) -> None:
    """40 groups on 4 workers under one global cap. Usage equal to the estimate: spend
    never exceeds the cap. Usage twice the estimate: it exceeds the cap by at most one
    estimate's error (the estimate itself) per worker."""
    s = metered_stack(tmp_path, valkey,
                      f"[usage.caps.global]\nday = {GLOBAL_CAP / 1_000_000}\n")
    try:
        s.start_workers(WORKERS, env={"PNC_TEST_USAGE_FACTOR": str(factor),
                                      "PNC_TEST_DELAY": "0.1"})
        await s.start_gateway()
        exchanges = await asyncio.gather(*(
            s.ask(f"g{i}", f"u{i}", f"@bot hello {i}", group=True, mention=True,
                  message_id=f"m{i}", timeout=120) for i in range(GROUPS)))
        answered = [e for e in exchanges if e.reply == "ok 1"]
        told = [e for e in exchanges if e.reply and "budget" in e.reply]
        assert answered and told, "the cap must stop some turns and let others through"
        assert len(answered) + len(told) == GROUPS
        calls = _calls(s.r)
        assert len(calls) == len(answered)  # a refused turn never reached the model
        total = spent(s, "global", GLOBAL_CAP)
        assert total.reserved == 0
        log = Budget(s.r, Keys()).log(today())
        assert sum(m["cost"] for m in log.values()) == total.spent
        assert sum(m["req"] for m in log.values()) == len(calls)
        if factor == 1:
            assert total.spent <= GLOBAL_CAP
        else:
            worst = max(int(str(c["estimate"])) for c in calls)
            assert total.spent <= GLOBAL_CAP + WORKERS * worst
        parked = set(Budget(s.r, Keys()).parked())
        assert len(parked) == len(told)
    finally:
        await s.close()


async def test_cap_reached_keeps_messages_tells_once_and_lift_lets_them_through(
        tmp_path: Path, valkey: Valkey) -> None:
    s = metered_stack(tmp_path, valkey)
    try:
        s.start_workers(1)
        await s.start_gateway()
        first = await s.ask("team", "bob", "@bot one", group=True, mention=True,
                            message_id="m1")
        assert first.reply == "ok 1"
        await s.settled("local:team")
        budget = Budget(s.r, Keys())
        # the group's day cap is what it spent: reached
        budget.set_cap("group:local:team", "day", spent(s, "group:local:team").spent)
        calls = len(_calls(s.r))
        second = await s.ask("team", "carol", "@bot two", group=True, mention=True,
                             message_id="m2")
        third = await s.ask("team", "dave", "@bot three", group=True, mention=True,
                            message_id="m3")
        assert second.reply is not None and "budget" in second.reply
        assert third.done and third.reply is None  # told once per period, not per message
        assert len(_calls(s.r)) == calls  # the model was not called
        assert budget.parked() == ["local:team"]
        waiting = [parse_entry(x).msg["message_id"]
                   for x in s.r.lrange("pnc:mailbox:local:team", 0, -1)]
        assert waiting == ["m2", "m3"]
        notices = [e for e in s.chat_events("team")
                   if e.get("type") == "chunk" and "budget" in e.get("text", "")]
        assert len(notices) == 1
        checks = await asyncio.to_thread(lambda: list(status_checks(s.config_path, model=False)))
        status = {c.name: c for c in checks}
        assert not status["spending caps"].ok and "local:team" in status["spending caps"].detail
        lifted = CliRunner().invoke(app, ["usage", "cap", "group:local:team", "day", "none",
                                          "-c", str(s.config_path)])
        assert lifted.exit_code == 0 and "1 stopped group(s) resume" in lifted.output
        await s.wait_for(lambda: any(e.get("type") == "chunk" and e.get("text") == "ok 2"
                                     for e in s.chat_events("team")),
                         timeout=60, what="the kept messages answered in one turn")
        await s.settled("local:team")
        assert budget.parked() == []
    finally:
        await s.close()


async def test_tool_loop_crossing_the_cap_stops_between_requests(
        tmp_path: Path, valkey: Valkey) -> None:
    s = metered_stack(tmp_path, valkey, '[policy]\nadmins = ["local:root"]\n')
    try:
        s.start_workers(1)
        await s.start_gateway()
        ex = await s.ask("tools", "bob", "@bot TOOLLOOP CAPNOW", group=True, mention=True,
                         message_id="t1")
        assert ex.reply is not None and "budget" in ex.reply
        calls = [c for c in _calls(s.r) if c["group"] == "local:tools"]
        assert [c["tool"] for c in calls] == [True]  # the request after the tool: refused
        assert Budget(s.r, Keys()).parked() == ["local:tools"]
        assert s.r.llen("pnc:mailbox:local:tools") == 1
        used = spent(s, "group:local:tools")
        assert used.reserved == 0 and used.spent == calls[0]["estimate"]
        # the operator lifts the chat's cap from the chat: the kept message goes through
        lift = await s.ask("tools", "root", "/usage cap day none", group=True,
                           message_id="t2")
        assert lift.reply is not None and "lifted" in lift.reply
        await s.wait_for(lambda: any(e.get("type") == "chunk" and e.get("text") == "ok 1"
                                     for e in s.chat_events("tools")),
                         timeout=60, what="the kept message answered")
    finally:
        await s.close()


async def test_background_job_at_the_cap_is_skipped_not_retried(
        tmp_path: Path, valkey: Valkey) -> None:
    s = metered_stack(tmp_path, valkey)
    s.config_path.write_text(s.config_path.read_text(encoding="utf-8").replace(
        'backend = "file"', 'backend = "file"\nextract = true'), encoding="utf-8")
    try:
        s.start_workers(1)
        await s.start_gateway()
        ex = await s.ask("bg", "bob", "@bot CAPNOW Atlas ships in May", group=True,
                         mention=True, message_id="b1")
        assert ex.reply == "ok 1"  # reserved before the cap moved: the turn ran

        def extraction_state() -> list[bytes | None]:
            return [s.r.hget(k, "done") for k in s.r.scan_iter("pnc:extract:*")]

        await s.wait_for(lambda: extraction_state() == [b"budget"], timeout=60,
                         what="the extraction skipped at the cap")
        assert [c["kind"] for c in _calls(s.r) if c["group"] == "local:bg"] == ["turn"]
        assert s.r.llen("pnc:extractq:local:bg") == 0  # not queued to be retried
    finally:
        await s.close()

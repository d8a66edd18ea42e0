"""Signal: the events stream across daemon restarts, gateway restarts, dead
connections and malformed events. signal-cli keeps no backlog for a client that was
not listening; these tests show what is lost in which receive mode, and that every
possible loss is reported (health + one log line) while nothing is doubled."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

from channels.signal import SignalChannel
from tests.channels.harness_signal import block, env, new_fake, signal_harness
from tests.channels.kit import MemoryCursorStore, RecordingSink, eventually
from tests.fakes.signal_cli import data_message

T0 = 1_700_000_100_000


def _gap_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "channels.signal" and "may be lost" in r.getMessage()]


async def test_daemon_restart_in_on_start_mode_reports_the_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="channels.signal")
    async with signal_harness("on-start") as h:
        await h.fake.receive(data_message("before", timestamp=T0))
        await h.sink.wait_for(1)
        before = datetime.now().astimezone()
        await h.fake.stop()  # the daemon goes down ...
        stream = h.channel.stream
        assert stream is not None

        async def down() -> bool:
            return not stream.connected.is_set()

        await eventually(down)
        await h.fake.receive(data_message("lost", timestamp=T0 + 1))  # waits on the server
        await h.fake.start()  # ... comes back, receives it before we listen again
        assert [e["envelope"]["timestamp"] for e in h.fake.dropped] == [T0 + 1]
        await h.fake.wait_subscribers(1)
        await h.fake.receive(data_message("after", timestamp=T0 + 2))
        got = await h.sink.wait_for(2)
        assert [i.text for i in got] == ["before", "after"]  # the lost one never appears
        status = h.channel.health()
        assert status["gaps"] == 1 and status["state"] == "ok"
        gap = status["last_gap"]
        start, end = datetime.fromisoformat(gap["from"]), datetime.fromisoformat(gap["to"])
        assert start <= before.replace(microsecond=0) <= end
        assert len(_gap_lines(caplog)) == 1


async def test_daemon_restart_in_on_connection_mode_loses_nothing() -> None:
    async with signal_harness("on-connection") as h:
        await h.fake.receive(data_message("before", timestamp=T0))
        await h.sink.wait_for(1)
        await h.fake.restart()
        await h.fake.receive(data_message("while away", timestamp=T0 + 1))  # stays on the server
        await h.fake.wait_subscribers(1)
        got = await h.sink.wait_for(2)
        assert [i.text for i in got] == ["before", "while away"]
        assert h.fake.dropped == []
        assert h.channel.health()["gaps"] == 0


@pytest.mark.parametrize(("mode", "gaps"), [("on-start", 1), ("on-connection", 0)])
async def test_gateway_restart_gap_comes_from_the_stored_cursor(mode: str, gaps: int) -> None:
    fake = new_fake(mode)
    await fake.start()
    cursors = MemoryCursorStore()
    try:
        for run in range(2):
            channel = SignalChannel.from_config("default", block(fake), env())
            channel.bind(cursors)
            sink = RecordingSink()
            await channel.start(sink)
            await fake.wait_subscribers(1)
            await fake.receive(data_message(f"run {run}", timestamp=T0 + run))
            [got] = await sink.wait_for(1)
            assert got.text == f"run {run}"
            status = channel.health()
            await channel.stop()
            if run == 0:
                assert status["gaps"] == 0  # nothing stored yet: a first start is no gap
        assert status["gaps"] == gaps
        assert "alive" in cursors.values and "last" in cursors.values
    finally:
        await fake.stop()


async def test_a_silent_connection_is_reopened() -> None:
    fake = new_fake(keepalive=3600)  # a stream that sends nothing, not even keep-alives
    await fake.start()
    channel = SignalChannel.from_config("default", block(fake, idle_timeout=0.3), env())
    try:
        await channel.start(RecordingSink())
        await fake.wait_subscribers(1)

        async def reopened() -> bool:
            return fake.connections >= 2

        await eventually(reopened)
    finally:
        await channel.stop()
        await fake.stop()


async def test_unreachable_daemon_at_start_is_a_state_not_a_crash() -> None:
    fake = new_fake()
    await fake.start()
    await fake.stop()  # the port is known, nothing listens
    channel = SignalChannel.from_config("default", block(fake, connect_wait=0.2), env())
    sink = RecordingSink()
    try:
        await channel.start(sink)
        assert channel.health()["state"] == "disconnected"
        await fake.start()
        await fake.wait_subscribers(1)
        await fake.receive(data_message("finally", timestamp=T0))
        await sink.wait_for(1)
        assert channel.health()["state"] == "ok"
    finally:
        await channel.stop()
        await fake.stop()


async def test_malformed_and_foreign_events_are_skipped() -> None:
    async with signal_harness() as h:
        h.fake.receive_raw("{not json")
        await h.fake.receive(data_message("other account", timestamp=T0, account="+15559999999"))
        await h.fake.receive({"account": "+15550001000", "envelope": {"dataMessage": {}}})
        await h.fake.receive(data_message("good", timestamp=T0 + 1))
        got = await h.sink.wait_for(1)
        assert [i.text for i in got] == ["good"]
        assert h.sink.calls == 1
        assert h.channel.health()["stream"] == "connected"

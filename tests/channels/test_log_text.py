"""No message text in the log: the platform libraries' records are made by
``channels.redact.LibraryTextGuard`` (the record factory ``pynanoclaw`` and the workers
install with ``guard_logs``), without their text from INFO up. Real slack-bolt behind
the gateway's real web app, with aiohttp's real access log."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from channels.models import Inbound
from channels.redact import LibraryTextGuard, guard_library_records
from channels.slack import SlackChannel
from gateway.intake import build_app
from tests.fakes.slack_api import (
    FakeSlack,
    channel_block,
    channel_env,
    event_callback,
    message_event,
    signed_headers,
)

WORDS = "my door code is 4417 Zanzibar"


class Records(logging.Handler):
    """Every record the root logger passes on, at every level: the witness that the
    library did log (else the log's silence would prove nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs() -> Iterator[tuple[io.StringIO, Records]]:
    """The guard installed as ``pynanoclaw --log-level info`` does: the operator's log (a
    stream handler at INFO) and a witness of every record (its handler at DEBUG)."""
    root = logging.getLogger()
    stream = io.StringIO()
    shown = logging.StreamHandler(stream)
    shown.setLevel(logging.INFO)
    shown.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    witness = Records()
    level = root.level
    guard = guard_library_records()
    root.setLevel(logging.DEBUG)
    root.addHandler(shown)
    root.addHandler(witness)
    try:
        yield stream, witness
    finally:
        logging.setLogRecordFactory(guard.make)
        root.removeHandler(shown)
        root.removeHandler(witness)
        root.setLevel(level)


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    fake = FakeSlack(users={"U0ALICE01": {"id": "U0ALICE01", "name": "alice"}})
    await fake.start()
    got: list[Inbound] = []

    async def sink(inbound: Inbound) -> None:
        got.append(inbound)

    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    await channel.start(sink)

    async def healthy() -> dict[str, Any]:
        return {"up": True, "ok": True, "degraded": []}

    try:
        async with TestClient(TestServer(build_app([channel], healthy))) as test_client:
            yield test_client
    finally:
        await channel.stop()
        await fake.stop()
    assert got == []  # nothing forged got in


def holding(records: list[logging.LogRecord], words: str) -> list[logging.LogRecord]:
    return [r for r in records if words.lower() in r.getMessage().lower()]


async def test_a_forged_slack_request_leaves_its_text_out_of_the_log(
    client: TestClient[Any, Any], logs: tuple[io.StringIO, Records]
) -> None:
    stream, witness = logs
    body = json.dumps(event_callback(message_event(WORDS))).encode()
    response = await client.post("/slack/events", data=body,
                                 headers=signed_headers(body, secret="forged"))
    assert response.status == 401
    # Bolt did log the request (its whole body, at INFO)...
    [bolt] = [r for r in witness.records if r.name == "slack_bolt.RequestVerification"]
    assert bolt.getMessage().startswith("[withheld]")
    # ...and no record at any level, nor the operator's log, holds a word of it
    assert holding(witness.records, "zanzibar") == []
    assert "zanzibar" not in stream.getvalue().lower()
    assert "slack_bolt" not in stream.getvalue()  # lowered to DEBUG: not shown at INFO


async def test_the_access_log_does_not_show_a_query(
    client: TestClient[Any, Any], logs: tuple[io.StringIO, Records]
) -> None:
    stream, witness = logs
    await client.get("/slack/events", params={"text": WORDS})
    assert any(r.name == "aiohttp.access" for r in witness.records)
    assert holding(witness.records, "zanzibar") == []
    assert "zanzibar" not in stream.getvalue().lower()


def test_a_library_warning_keeps_its_template_not_its_text(
    logs: tuple[io.StringIO, Records]
) -> None:
    stream, _ = logs
    log = logging.getLogger("discord.gateway")
    log.warning("Shard %s could not parse the event: %s", 3, {"content": WORDS})
    log.warning(f"Unhandled request ({WORDS})")
    try:
        raise ValueError(f"bad payload: {WORDS}")
    except ValueError:
        logging.getLogger("nio.client.async_client").exception("Error validating %s", WORDS)
    logging.getLogger("channels.slack").info("ours: %s", "kept")  # our own loggers pass
    shown = stream.getvalue()
    assert "zanzibar" not in shown.lower()
    assert "Shard 3 could not parse the event: [withheld]" in shown
    assert "WARNING discord.gateway: [withheld] (49 characters)" in shown
    assert "Error validating [withheld]" in shown and "ValueError: [withheld]" in shown
    assert "Traceback (most recent call last)" in shown
    assert "INFO channels.slack: ours: kept" in shown


def test_debug_shows_library_records_in_full() -> None:
    def make(debug: bool) -> logging.LogRecord:
        guard = LibraryTextGuard(logging.LogRecord, debug)
        return guard("slack_bolt.App", logging.INFO, __file__, 1, "body: %s", (WORDS,),
                     None)

    full = make(debug=True)
    assert full.getMessage() == f"body: {WORDS}" and full.levelno == logging.INFO
    quiet = make(debug=False)
    assert quiet.getMessage() == "body: [withheld]" and quiet.levelno == logging.DEBUG

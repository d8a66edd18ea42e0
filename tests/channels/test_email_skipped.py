"""Mail the channel skips for good (too big, unreadable) is never queued, so it has no
dead letter of its own: it must still show in ``/healthz`` (the channel's health),
``pynanoclaw dead list`` and ``pynanoclaw status``, with the reason. Real dovecot and
the real channel; what it recorded is then stored through the gateway's Redis cursor
store in a real Valkey, where the operator commands read it. (The channel itself runs
on an in-memory store here: stopping it while bound to a Redis store of this test's
client can hang, see the note in the issue's report.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from typer.testing import CliRunner

from channels.base import SKIPPED_KEY
from channels.models import Inbound
from gateway.app import RedisCursorStore
from gateway.cli import app
from gateway.operations import status_checks
from gateway.queue import Keys
from tests.channels.e2e import valkey
from tests.channels.harness_email import append, started_channel
from tests.channels.test_email_body import mail
from tests.fakes import dovecot
from tests.pipeline.conftest import write_config

pytestmark = pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON)


async def skip_two(url: str) -> tuple[Inbound, dict[str, Any]]:
    """A too-big and an unreadable mail before a good one; the channel's health, and
    its record stored as the gateway stores it."""
    async with started_channel({"max_message_bytes": 4000}) as h:
        await append(h.admin, mail("huge-2@example.org", "x" * 6000))
        await h.inject("malformed_mime")
        await h.inject("direct_to_bot")
        [got] = await h.sink.wait_for(1)
        health = h.channel.health()
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        store = RedisCursorStore(client, Keys(), "email", "default")
        await store.set(SKIPPED_KEY, h.cursors.values[SKIPPED_KEY])
    finally:
        await client.aclose()
    return got, health


def test_a_skipped_mail_shows_in_healthz_dead_list_and_status(tmp_path: Path) -> None:
    with valkey(tmp_path) as url:
        got, health = asyncio.run(skip_two(url))
        assert got.message_id == "dm-1@example.org"
        assert health["skipped"] == 2 and "malformed MIME" in health["last_skipped"]
        config = write_config(tmp_path / "c.toml", url)
        listing = CliRunner().invoke(app, ["dead", "list", "--config", str(config)])
        assert listing.exit_code == 0, listing.output
        assert "email:default: 2 skipped on arrival" in listing.output
        assert "too big" in listing.output and "malformed MIME" in listing.output
        checks = {c.name: c for c in status_checks(config, model=False)}
    skipped = checks["skipped email:default"]
    assert "2 inbound skipped" in skipped.detail and "malformed MIME" in skipped.detail

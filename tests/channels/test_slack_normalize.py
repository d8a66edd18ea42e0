"""The Slack normalization table, driven by recorded event fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from channels.slack.normalize import (
    EVENT_TABLE,
    SlackContext,
    event_rule,
    mentions,
    profile_name,
    to_inbound,
)

FIXTURES = Path(__file__).parent / "fixtures" / "slack"
CTX = SlackContext(channel="slack", account="default", bot_user_id="U0BOT0001", bot_name="claw")


def load(name: str) -> dict[str, Any]:
    """The ``event`` of a recorded ``event_callback`` payload."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    assert data["type"] == "event_callback" and data["event_id"]
    event: dict[str, Any] = data["event"]
    return event


TABLE: dict[str, dict[str, Any] | None] = json.loads((FIXTURES / "expected.json").read_text())


def test_every_fixture_is_in_the_table() -> None:
    files = {p.stem for p in FIXTURES.glob("*.json")} - {"expected"}
    assert files == set(TABLE)
    assert len(files) >= 15


@pytest.mark.parametrize("name", sorted(TABLE))
def test_fixture_normalizes_as_recorded(name: str) -> None:
    event, expected = load(name), TABLE[name]
    # "Alice L." is what users.info answers at the fake when the event has no profile
    inbound = to_inbound(event, CTX, profile_name(event) or "Alice L.")
    if expected is None:
        assert inbound is None, name
        return
    assert inbound is not None, name
    dumped = inbound.model_dump(mode="json")
    for key, value in expected.items():
        assert dumped[key] == value, key
    assert inbound.channel == "slack"
    assert inbound.message_id == event["ts"]
    # JSON-only: crosses Redis unchanged
    assert type(inbound).model_validate_json(inbound.model_dump_json()) == inbound


def test_message_and_app_mention_fixtures_share_the_dedupe_id() -> None:
    message = to_inbound(load("channel_message_mention"), CTX, "alice")
    mention = to_inbound(load("app_mention"), CTX, "alice")
    assert message is not None and mention is not None
    assert message.dedupe_id == mention.dedupe_id == "slack:default:C0GENERAL1:1700000100.000100"
    assert message.model_dump(exclude={"raw"}) == mention.model_dump(exclude={"raw"})


def test_every_ignored_table_entry_says_why() -> None:
    for key, rule in EVENT_TABLE.items():
        assert rule.why.strip(), key
    ignored = {k for k, r in EVENT_TABLE.items() if not r.handle}
    assert ("message", "bot_message") in ignored


def test_mentions_come_from_slack_encoding_not_a_name_regex() -> None:
    # The bot's *name* in plain text is not a mention; the encoded user token is.
    assert "U0BOT0001" not in mentions({"text": "hey claw, @claw?"})
    assert "U0BOT0001" in mentions({"text": "hey <@U0BOT0001|claw>"})
    # rich_text user elements count even if the text were re-rendered
    blocks = [{"type": "rich_text", "elements": [{"type": "rich_text_section",
              "elements": [{"type": "user", "user_id": "U0BOT0001"}]}]}]
    assert "U0BOT0001" in mentions({"text": "", "blocks": blocks})


@pytest.mark.parametrize("missing", ["channel", "user", "ts"])
def test_malformed_events_are_skipped_not_raised(missing: str) -> None:
    event = dict(load("channel_message_plain"))
    del event[missing]
    assert not event_rule(event, CTX.bot_user_id).handle
    assert to_inbound(event, CTX, "x") is None


def test_huge_event_keeps_raw_small() -> None:
    event = dict(load("channel_message_plain"), text="word " * 5000)
    inbound = to_inbound(event, CTX, "x")
    assert inbound is not None
    assert inbound.raw.get("_truncated") is True
    assert len(inbound.text) == len("word " * 5000)

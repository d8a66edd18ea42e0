"""Edits and deletions in the envelope: the cases the contract fixtures do not cover."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from channels.models import Inbound
from channels.slack.normalize import SlackContext, event_rule, to_inbound
from tests.channels.kit import load_fixture

CTX = SlackContext(channel="slack", account="default", bot_user_id="U0BOT0001", bot_name="claw")


def changed() -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(load_fixture("slack", "message_changed")["event"])
    return event


def deleted() -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(load_fixture("slack", "message_deleted")["event"])
    return event


def test_an_edit_or_deletion_must_name_its_original() -> None:
    base: dict[str, Any] = {"channel": "x", "chat_id": "1", "is_group": False,
                            "sender_id": "1", "sender_name": "A", "message_id": "1:e",
                            "text": "t"}
    for kind in ("edit", "deletion"):
        with pytest.raises(ValidationError, match="original_id"):
            Inbound(**base, kind=kind)
    old = Inbound(**base)  # an envelope from before kinds existed reads as a message
    assert (old.kind, old.original_id, old.command) == ("message", None, None)
    assert Inbound.model_validate_json(old.model_dump_json()) == old


def test_each_edit_has_its_own_dedupe_id() -> None:
    first = to_inbound(changed(), CTX, "Alice")
    later = changed()
    later["ts"] = later["event_ts"] = "1700000190.000100"
    second = to_inbound(later, CTX, "Alice")
    assert first is not None and second is not None
    assert first.original_id == second.original_id
    assert first.dedupe_id != second.dedupe_id


def test_a_change_that_keeps_the_text_is_not_an_edit() -> None:
    unfurl = changed()
    unfurl["message"]["text"] = unfurl["previous_message"]["text"]
    unfurl["message"]["attachments"] = [{"from_url": "https://example.com"}]
    assert to_inbound(unfurl, CTX, "Alice") is None


def test_changes_to_bot_messages_are_ignored() -> None:
    own = changed()
    own["message"]["user"] = own["previous_message"]["user"] = "U0BOT0001"
    other = changed()
    other["message"]["bot_id"] = "B0OTHER01"
    own_deleted = deleted()
    own_deleted["previous_message"]["user"] = "U0BOT0001"
    for event in (own, other, own_deleted):
        assert to_inbound(event, CTX, "x") is None


def test_a_deletion_without_the_old_message_still_names_the_original() -> None:
    event = deleted()
    del event["previous_message"]
    got = to_inbound(event, CTX, "")
    assert got is not None
    assert (got.kind, got.original_id, got.sender_id, got.text) == (
        "deletion", "1700000101.000100", "", "")


def test_an_edit_without_its_message_is_malformed() -> None:
    event = changed()
    del event["message"]
    rule = event_rule(event, CTX.bot_user_id)
    assert rule.malformed and not rule.handle

"""The shipped Slack app manifest asks for what the adapter uses, and no more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import channels.slack
from channels.slack.normalize import EVENT_TABLE

MANIFEST = Path(channels.slack.__file__).parent / "app_manifest.yml"


def load() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return data


def test_scopes_are_exactly_the_documented_set() -> None:
    scopes = set(load()["oauth_config"]["scopes"]["bot"])
    assert scopes == {
        "app_mentions:read", "channels:history", "groups:history", "im:history",
        "mpim:history", "chat:write", "users:read", "files:read", "commands",
    }


def test_subscribed_events_are_handled_by_the_normalization_table() -> None:
    events = set(load()["settings"]["event_subscriptions"]["bot_events"])
    handled_types = {kind for (kind, _), rule in EVENT_TABLE.items() if rule.handle}
    for event in events:
        assert event.split(".", 1)[0] in handled_types, event
    # every conversation kind delivers plain messages, and mentions come through
    assert {"message.channels", "message.groups", "message.im", "message.mpim",
            "app_mention"} <= events


def test_socket_mode_and_dms_are_on() -> None:
    manifest = load()
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True

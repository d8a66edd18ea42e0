"""Slack adapter: Socket Mode or the HTTP Events API in, chat.postMessage out."""

from __future__ import annotations

from channels.slack.channel import SLACK_LIMITS, SlackChannel
from channels.slack.settings import SlackSecrets, SlackSettings

__all__ = ["SLACK_LIMITS", "SlackChannel", "SlackSecrets", "SlackSettings"]

"""Discord adapter: gateway websocket in, REST out (discord.py)."""

from __future__ import annotations

from channels.discord.channel import DiscordChannel
from channels.discord.settings import DiscordSettings

__all__ = ["DiscordChannel", "DiscordSettings"]

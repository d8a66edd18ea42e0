"""Telegram adapter: Bot API long polling or webhook in, HTML messages out."""

from __future__ import annotations

from channels.telegram.channel import TELEGRAM_LIMITS, TelegramChannel
from channels.telegram.settings import TelegramSettings

__all__ = ["TELEGRAM_LIMITS", "TelegramChannel", "TelegramSettings"]

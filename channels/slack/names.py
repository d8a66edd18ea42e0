"""Sender display names: users.info, cached per user id."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from channels.recent import Recent
from channels.slack.errors import map_error
from channels.slack.normalize import first_name

__all__ = ["NameCache"]

log = logging.getLogger(__name__)


def _name_of(user: dict[str, Any]) -> str | None:
    raw = user.get("profile")
    profile: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return first_name(profile.get("display_name"), profile.get("real_name"),
                      user.get("real_name"), user.get("name"))


class NameCache:
    """Resolves a user id to a display name; falls back to the id on any failure so a
    slow or failing users.info never blocks a message from becoming durable."""

    def __init__(self, web: AsyncWebClient, *, timeout: float = 2.0, size: int = 2048) -> None:
        self._web = web
        self._timeout = timeout
        self._names: Recent[str, str] = Recent(size)

    def remember(self, user_id: str, name: str) -> None:
        self._names[user_id] = name

    async def lookup(self, user_id: str) -> str:
        cached = self._names.get(user_id)
        if cached is not None:
            return cached
        try:
            response = await asyncio.wait_for(
                self._web.users_info(user=user_id), timeout=self._timeout
            )
            user = response.get("user")
            name = _name_of(user) if isinstance(user, dict) else None
        except Exception as exc:  # any failure: the id is a usable name
            log.warning("slack users.info for %s failed: %s", user_id, map_error("users.info", exc))
            return user_id
        self.remember(user_id, name or user_id)
        return name or user_id

"""Where a Discord message lives (DM, group DM, channel, thread of a channel), from
discord.py's cache or, for a guild channel it does not know, ``GET /channels/{id}``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord

from channels.discord.errors import CALL_ERRORS, map_error
from channels.discord.normalize import Place
from channels.errors import PermanentError
from channels.recent import Recent
from channels.retry import retrying

if TYPE_CHECKING:
    from channels.discord.channel import DiscordChannel

log = logging.getLogger(__name__)

#: How many channel-id -> place resolutions to remember (the least recent go first).
PLACE_CACHE_SIZE = 4096
#: Tries of GET /channels/{id} before a message's channel is taken as not a thread.
RESOLVE_TRIES = 3


class Places:
    """The channel's place lookups; retries follow the channel's sink backoff."""

    def __init__(self, owner: DiscordChannel) -> None:
        self._owner = owner
        self._cache: Recent[int, Place] = Recent(PLACE_CACHE_SIZE)

    def now(self, message: discord.Message) -> Place | None:
        """Where the message lives, from the cache; None when a guild channel is not
        cached and ``resolve`` must ask Discord whether it is a thread."""
        channel = message.channel
        if isinstance(channel, discord.DMChannel):
            return Place(chat_id=str(channel.id), thread_id=None, is_group=False)
        if isinstance(channel, discord.GroupChannel):
            return Place(chat_id=str(channel.id), thread_id=None, is_group=True,
                         chat_name=channel.name)
        if isinstance(channel, discord.Thread):
            return self.thread_place(channel)
        if isinstance(channel, discord.PartialMessageable):
            if channel.guild_id is None:
                return Place(chat_id=str(channel.id), thread_id=None, is_group=False)
            return self._cache.get(channel.id)
        return Place(chat_id=str(channel.id), thread_id=None, is_group=True,
                     chat_name=f"#{getattr(channel, 'name', channel.id)}")

    @staticmethod
    def thread_place(thread: discord.Thread) -> Place:
        parent = thread.parent
        return Place(
            chat_id=str(thread.parent_id),
            thread_id=str(thread.id),
            is_group=True,
            chat_name=f"#{parent.name}" if parent is not None else None,
        )

    async def fetch(
        self, channel_id: int
    ) -> discord.abc.GuildChannel | discord.abc.PrivateChannel | discord.Thread | None:
        """``GET /channels/{id}``, a few quick tries for transient failures."""
        client = self._owner._client
        assert client is not None
        try:
            async for attempt in retrying(
                    initial=self._owner.sink_retry_base, maximum=self._owner.sink_retry_cap,
                    attempts=RESOLVE_TRIES,
                    retry_if=lambda exc: isinstance(exc, CALL_ERRORS) and not isinstance(
                        map_error(exc), PermanentError)):
                with attempt:
                    return await client.fetch_channel(channel_id)
        except CALL_ERRORS as exc:
            log.warning("discord: could not look up channel %s (%s)", channel_id,
                        map_error(exc))
        return None

    async def resolve(self, channel_id: int) -> Place:
        """A guild channel the cache does not know (e.g. a thread created while we were
        away): ask ``GET /channels/{id}`` whether it is a thread, once."""
        cached = self._cache.get(channel_id)
        if cached is not None:
            return cached
        fetched = await self.fetch(channel_id)
        if fetched is None:
            # Better to keep the message (as its own chat, not a thread) than lose it.
            return Place(chat_id=str(channel_id), thread_id=None, is_group=True)
        if isinstance(fetched, discord.Thread):
            place = self.thread_place(fetched)
        else:
            place = Place(chat_id=str(channel_id), thread_id=None, is_group=True,
                          chat_name=f"#{getattr(fetched, 'name', channel_id)}")
        self._cache[channel_id] = place
        return place

"""Edits and deletions from Discord's raw gateway events, as ``Inbound`` changes.

Raw events (``MESSAGE_UPDATE``/``MESSAGE_DELETE`` as discord.py's ``RawMessage*Event``)
arrive whether or not the message is cached, so an edit or deletion of a message the
bot saw before a restart is still reported.
"""

from __future__ import annotations

import discord

from channels.discord.normalize import (
    Place,
    deletion_to_inbound,
    edit_to_inbound,
    is_conversation,
)
from channels.discord.places import Places
from channels.models import Inbound


def change_to_inbound(
    event: discord.RawMessageUpdateEvent | discord.RawMessageDeleteEvent,
    places: Places,
    *,
    bot_id: int,
    account: str,
) -> tuple[Inbound, bool] | None:
    """The change as an ``Inbound`` and whether its place came from the cache (False:
    the adapter must still resolve whether the channel is a thread); None when it is
    not a conversation message (a bot's, or this bot's own)."""
    if isinstance(event, discord.RawMessageUpdateEvent):
        place = places.now(event.message)
        provisional = place or Place(str(event.channel_id), None, True)
        edit = edit_to_inbound(event.message, provisional, bot_id=bot_id, account=account)
        return None if edit is None else (edit, place is not None)
    cached = event.cached_message
    if cached is not None and not is_conversation(cached, bot_id):
        return None
    place = places.now(cached) if cached is not None else None
    if place is None and event.guild_id is None:  # a DM: never a thread, nothing to ask
        place = Place(str(event.channel_id), None, False)
    provisional = place or Place(str(event.channel_id), None, True)
    deletion = deletion_to_inbound(event.message_id, provisional, account=account,
                                   cached=cached)
    return deletion, place is not None

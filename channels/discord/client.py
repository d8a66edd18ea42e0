"""The discord.py client the adapter runs: the intents it asks for, and the events it
forwards to its ``DiscordChannel``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import discord

import channels.discord.endpoint as endpoint
from channels.discord.errors import CALL_ERRORS, login_error
from channels.discord.settings import DiscordSettings
from channels.discord.transport import surfacing_trace
from channels.pools import aiohttp_connector

if TYPE_CHECKING:
    from channels.discord.channel import DiscordChannel

log = logging.getLogger("channels.discord.channel")


def intents() -> discord.Intents:
    """Exactly what the adapter needs: guild and DM messages, their text (the
    privileged Message Content intent), and guilds (channel and thread cache)."""
    return discord.Intents(guilds=True, guild_messages=True, dm_messages=True,
                           message_content=True)


class Client(discord.Client):
    """A discord.py client that forwards the events the adapter needs."""

    def __init__(self, owner: DiscordChannel, **options: Any) -> None:
        # our keep-alive (channels.pools); limit 0 is what discord.py's own connector has
        super().__init__(connector=aiohttp_connector(limit=0), **options)
        self._owner = owner

    async def on_connect(self) -> None:
        # every READY: the first one, and each new session after a failed resume
        self._owner._on_ready()

    async def on_resumed(self) -> None:
        log.info("discord: gateway session resumed (missed events are replayed)")

    async def on_disconnect(self) -> None:
        log.info("discord: gateway disconnected; discord.py reconnects with backoff")

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        # Take MESSAGE_CREATE synchronously, inside the gateway's parse step: an
        # ``on_message`` coroutine runs later as its own task, by which time a
        # MESSAGE_UPDATE read from the socket may already have edited the cached
        # Message in place, and tasks would not guarantee gateway order either.
        if event == "message" and args and isinstance(args[0], discord.Message):
            self._owner._enqueue(args[0])
        elif event in ("raw_message_edit", "raw_message_delete") and args:
            self._owner._enqueue_change(args[0])
        super().dispatch(event, *args, **kwargs)


async def check_token(settings: DiscordSettings, token: str) -> str:
    """Log in (discord.py's login is ``GET /users/@me``) and out again; the bot user's
    id, or ``PermanentError`` when Discord rejects the token."""
    base = settings.api_base_url
    if base:
        endpoint.acquire(base)
    client = discord.Client(intents=intents(), http_trace=surfacing_trace())
    try:
        await client.login(token)
        who = str(client.user.id) if client.user else "?"
    except CALL_ERRORS as exc:
        raise login_error(exc, settings.token_env) from None
    finally:
        await client.close()
        if base:
            endpoint.release()
    return f"bot user {who}"

"""Point discord.py at a Discord-compatible server other than discord.com, and say
where attachments may be downloaded from (``CdnFiles``).

discord.py keeps its endpoints in class attributes: ``discord.http.Route.BASE`` (the
REST base, read when each request's route is built) and
``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` (the gateway a non-sharded
``Client`` connects to; it never asks ``GET /gateway/bot`` itself). Both are
process-wide, so one process can talk to one Discord at a time: a second account
asking for a different server is refused instead of silently re-pointing the first.
"""

from __future__ import annotations

from dataclasses import dataclass

import yarl
from discord.gateway import DiscordWebSocket
from discord.http import INTERNAL_API_VERSION, Route

from channels.discord.settings import DiscordSettings
from channels.download import fetch_capped, host_of
from channels.errors import PermanentError
from channels.models import Attachment

_DEFAULT_REST = Route.BASE
_DEFAULT_GATEWAY = DiscordWebSocket.DEFAULT_GATEWAY


@dataclass
class _Override:
    api_base_url: str
    users: int = 0


_active: _Override | None = None


def rest_base(api_base_url: str) -> str:
    """``http://host:port`` -> ``http://host:port/api/v10`` (the version discord.py speaks)."""
    return f"{api_base_url.rstrip('/')}/api/v{INTERNAL_API_VERSION}"


def acquire(api_base_url: str) -> None:
    """Send every REST call of this process to ``api_base_url``; refcounted."""
    global _active
    if _active is not None and _active.api_base_url != api_base_url:
        raise ValueError(
            "channels.discord: api_base_url differs between two Discord accounts in one "
            "process; discord.py keeps its endpoint process-wide, so use one value"
        )
    if _active is None:
        _active = _Override(api_base_url)
        Route.BASE = rest_base(api_base_url)
    _active.users += 1


def set_gateway(url: str) -> None:
    """Connect this process's Discord clients to ``url`` (e.g. from ``GET /gateway/bot``)."""
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)


def release() -> None:
    """Undo one ``acquire``; the last one restores discord.com."""
    global _active
    if _active is None:
        return
    _active.users -= 1
    if _active.users <= 0:
        _active = None
        Route.BASE = _DEFAULT_REST
        DiscordWebSocket.DEFAULT_GATEWAY = _DEFAULT_GATEWAY


#: hosts Discord serves attachments from; their URLs are signed, so no token is sent
CDN_HOSTS = ("cdn.discordapp.com", "media.discordapp.net")


class CdnFiles:
    """``Channel.fetch_attachment`` for ``DiscordChannel``: an attachment's URL is
    fetched from Discord's CDN, or from the server this process talks to instead of
    discord.com (``api_base_url``), and no other host (``channels.download``)."""

    settings: DiscordSettings

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        if not attachment.url:
            raise PermanentError("no_url", "discord attachment without url")
        hosts = {*CDN_HOSTS, host_of(self.settings.api_base_url) or "discord.com"}
        return await fetch_capped(attachment.url, max_bytes, hosts=hosts)

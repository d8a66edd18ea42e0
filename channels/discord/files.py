"""Files to Discord: one message with the file attached (multipart ``files[0]``)."""

from __future__ import annotations

import io
from typing import Protocol

import discord

from channels.discord.client import Client
from channels.discord.errors import CALL_ERRORS, map_error
from channels.discord.nonce import send_nonce
from channels.discord.render import MAX_MESSAGE_LEN
from channels.errors import mapped
from channels.models import Outbound


class _Adapter(Protocol):
    def _require_client(self) -> Client: ...

    @staticmethod
    def _snowflake(value: str, what: str) -> int: ...


class FileSending:
    """``Channel.send_file`` for ``DiscordChannel``."""

    async def send_file(self: _Adapter, message: Outbound, data: bytes, name: str,
                        caption: str = "") -> str:
        """The caption as the message's content, in the thread if any; the nonce of
        (reply id, 0) with ``enforce_nonce`` makes a re-send return the first message.
        The caption pings nobody."""
        channel = self._require_client().get_partial_messageable(
            self._snowflake(message.thread_id or message.chat_id, "chat_id"))
        with mapped(CALL_ERRORS, map_error):
            sent = await channel.send(caption[:MAX_MESSAGE_LEN] or None,
                                      file=discord.File(io.BytesIO(data), filename=name),
                                      allowed_mentions=discord.AllowedMentions.none(),
                                      nonce=send_nonce(message.reply_id, 0))
        return str(sent.id)

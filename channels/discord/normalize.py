"""discord.py ``Message`` -> ``Inbound``.

Gateway MESSAGE_CREATE becomes a ``kind="message"`` Inbound. MESSAGE_UPDATE with an
``edited_timestamp`` becomes ``kind="edit"`` (the new text; ``original_id`` = the
message id, ``message_id`` = ``<id>:edit:<edited_timestamp>`` so each edit has its own
dedupe key); an update without one is Discord filling in embeds, not an edit, and is
ignored. MESSAGE_DELETE becomes ``kind="deletion"`` (``original_id``, empty text; the
sender only when discord.py still had the message cached). The gateway decides what
edits and deletions do (gateway/intake/_router.py). Deliberately ignored:

* messages by bots (this one included) and system messages (joins, pins, thread
  created, boosts ...): they are not conversation.

A forward (``message_reference`` of type FORWARD with ``message_snapshots``) arrives
with empty content: its text is the snapshot's content, and ``forwarded_from`` names
the channel it came from (Discord does not include the original author). Mentions
inside the snapshot do not set ``mentions_bot``: the original author wrote them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import discord

from channels.models import Attachment, Inbound, attachment_type

NAME = "discord"

#: Conversation; everything else (pins, joins, thread notices ...) is a system message.
_CONVERSATION = frozenset({discord.MessageType.default, discord.MessageType.reply})


@dataclass(frozen=True)
class Place:
    """Where a message lives, as the group model sees it.

    A thread maps to its parent channel (``chat_id``) plus the thread (``thread_id``):
    a thread is a side conversation of one channel, so it shares that channel's group
    memory and per-group order, and replies still land inside the thread. Forum posts
    are threads of the forum channel and so share the forum's memory.
    """

    chat_id: str
    thread_id: str | None
    is_group: bool
    chat_name: str | None = None


def is_conversation(message: discord.Message, bot_id: int) -> bool:
    """True for a human's ordinary message or reply; False for bots and system events."""
    if message.author.bot or message.author.id == bot_id:
        return False
    return message.type in _CONVERSATION


def attachments(message: discord.Message) -> list[Attachment]:
    found = [_attachment(a) for a in message.attachments]
    for snapshot in _snapshots(message):
        found.extend(_attachment(a) for a in snapshot.attachments)
    return found


def _attachment(a: discord.Attachment) -> Attachment:
    return Attachment(
        id=str(a.id),
        type=attachment_type(a.content_type),
        name=a.filename,
        size=a.size,
        mime=a.content_type,
        url=a.url,
    )


def _replied(message: discord.Message) -> discord.Message | None:
    ref = message.reference
    if ref is None:
        return None
    resolved = ref.resolved if ref.resolved is not None else ref.cached_message
    return resolved if isinstance(resolved, discord.Message) else None


def _is_forward(message: discord.Message) -> bool:
    ref = message.reference
    return ref is not None and ref.type is discord.MessageReferenceType.forward


def _snapshots(message: discord.Message) -> list[discord.MessageSnapshot]:
    return list(message.message_snapshots) if _is_forward(message) else []


def forwarded_from(message: discord.Message) -> str | None:
    """Where a forwarded message came from, from its ``message_reference`` only."""
    ref = message.reference
    if ref is None or not _is_forward(message):
        return None
    details = [f"discord channel {ref.channel_id}"]
    if ref.message_id is not None:
        details.append(f"message {ref.message_id}")
    guild = message.guild
    same_guild = guild is not None and ref.guild_id in (None, guild.id)
    source = guild.get_channel_or_thread(ref.channel_id) if guild and same_guild else None
    if source is not None:
        return f"channel #{source.name} ({', '.join(details)})"
    if ref.guild_id is not None and not same_guild:
        details.append(f"server {ref.guild_id}")
    return f"another channel ({', '.join(details)})"


_USER = re.compile(r"<@!?([0-9]{15,20})>")
_ROLE = re.compile(r"<@&([0-9]{15,20})>")
_CHANNEL = re.compile(r"<#([0-9]{15,20})>")


def forwarded_text(message: discord.Message) -> str:
    """The snapshots' content, cleaned the way ``clean_content`` cleans a message:
    mentions read as names where this guild knows them, ``@everyone`` defused."""
    guild = message.guild
    parts: list[str] = []
    for snapshot in _snapshots(message):
        text = snapshot.content

        def user(m: re.Match[str]) -> str:
            member = guild.get_member(int(m.group(1))) if guild is not None else None
            return f"@{member.display_name}" if member is not None else "@unknown-user"

        def role(m: re.Match[str]) -> str:
            found = guild.get_role(int(m.group(1))) if guild is not None else None
            return f"@{found.name}" if found is not None else "@deleted-role"

        def channel(m: re.Match[str]) -> str:
            found = guild.get_channel_or_thread(int(m.group(1))) if guild is not None else None
            return f"#{found.name}" if found is not None else "#unknown-channel"

        text = _CHANNEL.sub(channel, _ROLE.sub(role, _USER.sub(user, text)))
        text = text.replace("@everyone", "@\u200beveryone").replace("@here", "@\u200bhere")
        if text:
            parts.append(text)
    return "\n\n".join(parts)


def _text(message: discord.Message) -> str:
    # clean_content shows mentions as the client does (@name, #channel) and defuses
    # @everyone, so the model reads what people read. A forward's own content is
    # empty on Discord today; were it not, it stays in front of the snapshot's (a
    # message that is no forward has none).
    return "\n\n".join(part for part in (message.clean_content, forwarded_text(message))
                       if part)


def reply_to_id(message: discord.Message) -> str | None:
    """The id of the message this one answers; forwards are not replies."""
    ref = message.reference
    if ref is None or ref.message_id is None:
        return None
    if ref.type is not discord.MessageReferenceType.default:
        return None
    return str(ref.message_id)


def mentions_bot(message: discord.Message, bot_id: int) -> bool:
    """Discord's own mention entities, not a regex: the ``mentions`` array (a ``<@id>``
    in the text), the bot's managed role in ``mention_roles``, or a reply to one of
    the bot's messages."""
    if any(user.id == bot_id for user in message.mentions):
        return True
    guild = message.guild
    own_role = guild.self_role if guild is not None else None
    if own_role is not None and own_role in message.role_mentions:
        return True
    replied = _replied(message)
    return (
        replied is not None
        and reply_to_id(message) is not None
        and replied.author.id == bot_id
    )


def _is_admin(author: discord.User | discord.Member) -> bool:
    if not isinstance(author, discord.Member):
        return False
    perms = author.guild_permissions
    return perms.administrator or perms.manage_guild


def to_inbound(
    message: discord.Message, place: Place, *, bot_id: int, account: str
) -> Inbound:
    """Normalize one conversation message (``is_conversation`` checked by the caller)."""
    replied = _replied(message)
    reply_id = reply_to_id(message)
    return Inbound(
        channel=NAME,
        account=account,
        **asdict(place),  # chat_id, thread_id, is_group, chat_name
        sender_id=str(message.author.id),
        sender_name=message.author.display_name,
        message_id=str(message.id),
        text=_text(message),
        reply_to_id=reply_id,
        reply_to_text=replied.clean_content if replied is not None and reply_id else None,
        forwarded_from=forwarded_from(message),
        mentions_bot=mentions_bot(message, bot_id),
        is_admin=_is_admin(message.author),
        attachments=attachments(message),
        raw={
            "guild_id": str(message.guild.id) if message.guild is not None else None,
            "channel_id": str(message.channel.id),
            "type": message.type.value,
        },
    )


def edit_to_inbound(
    message: discord.Message, place: Place, *, bot_id: int, account: str
) -> Inbound | None:
    """A MESSAGE_UPDATE as an edit; None when it is not a person's text edit."""
    if message.edited_at is None or not is_conversation(message, bot_id):
        return None
    inbound = to_inbound(message, place, bot_id=bot_id, account=account)
    return inbound.as_edit(int(message.edited_at.timestamp() * 1000))


def deletion_to_inbound(
    message_id: int,
    place: Place,
    *,
    account: str,
    cached: discord.Message | None = None,
) -> Inbound:
    """A MESSAGE_DELETE as a deletion of ``message_id`` (sender known only if cached)."""
    author = cached.author if cached is not None else None
    return Inbound(
        channel=NAME,
        account=account,
        **asdict(place),  # chat_id, thread_id, is_group, chat_name
        sender_id=str(author.id) if author is not None else "",
        sender_name=author.display_name if author is not None else "",
        message_id=f"{message_id}:deleted",
        text="",
        kind="deletion",
        original_id=str(message_id),
    )

"""Telegram updates to ``Inbound``: one table keyed by update type.

Deliberate choices (each covered by a fixture in tests/channels/fixtures/telegram):

* ``edited_message`` / ``edited_channel_post`` become ``kind="edit"`` with the new text,
  ``original_id`` = the edited message's id and ``message_id`` = ``<id>:edit:<edit_date>``
  (an edit keeps Telegram's ``message_id``; the suffix keeps each edit's dedupe key
  apart from the original's). Telegram delivers no deletion events to bots, so no
  ``kind="deletion"`` ever comes from this adapter.
* A ``bot_command`` entity at the start of the text addressed to this bot (``/cmd`` or
  ``/cmd@thisbot``) fills ``command``; ``/cmd@otherbot`` is another bot's and does not.
* Service messages (members joined, pinned, topic created ...) carry no text or media
  and are dropped.
* In forum topics every message "replies" to the topic's creation message; that is
  the thread, not a reply, so only real replies fill ``reply_to_id``.
* ``mentions_bot`` comes from Telegram's entities, never from a regex on the text: a
  ``mention`` entity spelling the bot's @username, a ``text_mention`` of the bot's user
  id, a ``bot_command`` addressed ``/cmd@bot``, or a reply to one of the bot's messages.
* A forward (``forward_origin``: user, hidden user, chat or channel) keeps its text as
  Telegram delivers it and names its origin in ``forwarded_from``; the forwarder is the
  sender, the words are the origin's. Automatic forwards from a linked channel into its
  discussion group carry ``forward_origin`` too and count as forwards. A mention of the
  bot inside forwarded text does not set ``mentions_bot``: the origin wrote it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from telegram import (
    Animation,
    Audio,
    Chat,
    Document,
    Message,
    MessageEntity,
    MessageOrigin,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
    PhotoSize,
    Sticker,
    Update,
    Video,
    VideoNote,
    Voice,
)

from channels.models import Attachment, Inbound, trim_raw


@dataclass(frozen=True)
class BotIdentity:
    """Who "the bot" is, for mention and reply-to-bot detection."""

    id: int
    username: str  # without "@"


#: update type -> how to get the message to normalize (types not here: dropped on purpose)
UPDATE_TABLE: dict[str, Callable[[Update], Message | None]] = {
    kind: attrgetter(kind)
    for kind in ("message", "channel_post", "edited_message", "edited_channel_post")
}

#: update types that carry a new version of an earlier message
_EDITS = frozenset({"edited_message", "edited_channel_post"})


def normalize_update(update: Update, bot: BotIdentity, account: str = "default") -> Inbound | None:
    """The ``Inbound`` for one update, or None when the update is not a message we pass on."""
    # an update carries exactly one of its optional fields: its type
    fields = ((kind, get(update)) for kind, get in UPDATE_TABLE.items())
    kind, message = next(((k, m) for k, m in fields if m is not None), (None, None))
    if message is None:
        return None
    inbound = normalize_message(message, bot, account, raw=update.to_dict())
    if inbound is None or kind not in _EDITS:
        return inbound
    return inbound.as_edit(
        int(message.edit_date.timestamp()) if message.edit_date else update.update_id)


def normalize_message(
    message: Message,
    bot: BotIdentity,
    account: str = "default",
    raw: dict[str, object] | None = None,
) -> Inbound | None:
    text = message.text or message.caption or ""
    attachments = attachments_of(message)
    if not text and not attachments:
        return None  # service message
    chat = message.chat
    sender_id, sender_name, is_admin = _sender(message)
    reply_to_id, reply_to_text = _reply(message)
    thread_id = (
        str(message.message_thread_id)
        if message.is_topic_message and message.message_thread_id
        else None
    )
    return Inbound(
        channel="telegram",
        account=account,
        chat_id=str(chat.id),
        chat_name=chat.effective_name,
        thread_id=thread_id,
        is_group=chat.type != Chat.PRIVATE,
        sender_id=sender_id,
        sender_name=sender_name,
        message_id=str(message.message_id),
        text=text,
        reply_to_id=reply_to_id,
        reply_to_text=reply_to_text,
        forwarded_from=forwarded_from(message.forward_origin),
        # A mention inside forwarded text is the origin's, not the forwarder's.
        mentions_bot=message.forward_origin is None and mentions_bot(message, bot),
        is_admin=is_admin,
        command=command_of(message, bot) if message.forward_origin is None else None,
        attachments=attachments,
        received_at=message.date,
        raw=trim_raw(dict(raw or message.to_dict())),
    )


def _sender(message: Message) -> tuple[str, str, bool]:
    """(id, display name, is_admin). Anonymous group admins post as the group itself."""
    if message.sender_chat is not None:
        sender_chat = message.sender_chat
        anonymous_admin = sender_chat.id == message.chat.id and message.chat.type != Chat.CHANNEL
        return (
            str(sender_chat.id),
            sender_chat.effective_name or str(sender_chat.id),
            anonymous_admin,
        )
    user = message.from_user
    if user is None:
        return str(message.chat.id), message.chat.effective_name or str(message.chat.id), False
    return str(user.id), user.full_name or user.username or str(user.id), False


def forwarded_from(origin: MessageOrigin | None) -> str | None:
    """A readable origin for a forward, from Telegram's ``forward_origin`` only."""
    if origin is None:
        return None
    if isinstance(origin, MessageOriginUser):
        user = origin.sender_user
        name = user.full_name or user.username or str(user.id)
        return f"{name} (telegram user {user.id})"
    if isinstance(origin, MessageOriginHiddenUser):
        return f"{origin.sender_user_name} (telegram user with a hidden account)"
    if isinstance(origin, MessageOriginChannel):
        details = [f"telegram channel {origin.chat.id}", f"message {origin.message_id}"]
        return _chat_origin("channel", origin.chat, details, origin.author_signature)
    if isinstance(origin, MessageOriginChat):
        details = [f"telegram chat {origin.sender_chat.id}"]
        return _chat_origin("chat", origin.sender_chat, details, origin.author_signature)
    # A kind this library version does not know yet: still a forward, origin unnamed.
    return f"an unknown origin ({origin.type})"


def _chat_origin(kind: str, chat: Chat, details: list[str], signature: str | None) -> str:
    name = f"@{chat.username}" if chat.username else chat.effective_name
    if signature:
        details.append(f"signed {signature}")
    label = f"{kind} {name}" if name else kind
    return f"{label} ({', '.join(details)})"


def _is_thread_root(message: Message) -> bool:
    reply = message.reply_to_message
    return bool(
        reply is not None
        and message.is_topic_message
        and (reply.forum_topic_created is not None or reply.message_id == message.message_thread_id)
    )


def _reply(message: Message) -> tuple[str | None, str | None]:
    quote = message.quote.text if message.quote is not None else None
    reply = message.reply_to_message
    if reply is None or _is_thread_root(message):
        return None, quote  # a quote of a message in another chat keeps its text
    return str(reply.message_id), quote or reply.text or reply.caption


def mentions_bot(message: Message, bot: BotIdentity) -> bool:
    reply = message.reply_to_message
    if reply is not None and not _is_thread_root(message):
        author = reply.from_user
        if author is not None and author.id == bot.id:
            return True
    handle = "@" + bot.username.lower()
    entities = {**message.parse_entities(), **message.parse_caption_entities()}
    for entity, value in entities.items():
        if entity.type == MessageEntity.MENTION and value.lower() == handle:
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot.id:
            return True
        if entity.type == MessageEntity.BOT_COMMAND and value.lower().endswith(handle):
            return True
    return False


def command_of(message: Message, bot: BotIdentity) -> str | None:
    """The command this message gives this bot, from a ``bot_command`` entity at offset
    0: ``/cmd`` or ``/cmd@<this bot>``, lowercased without "/" and "@bot". A command
    addressed to another bot (``/cmd@otherbot``) is None."""
    for entity, value in message.parse_entities([MessageEntity.BOT_COMMAND]).items():
        if entity.offset != 0:
            continue
        name, _, addressee = value[1:].partition("@")
        if addressee and addressee.lower() != bot.username.lower():
            return None
        return name.lower() or None
    return None


def _file(
    media: PhotoSize | Animation | Document | Video | VideoNote | Voice | Audio | Sticker,
    kind: str, name: str | None = None, mime: str | None = None,
) -> Attachment:
    return Attachment(id=media.file_id, type=kind, name=name, size=media.file_size, mime=mime)


def attachments_of(message: Message) -> list[Attachment]:
    """Media as metadata with Telegram file ids (download later through getFile)."""
    found: list[Attachment] = []
    if message.photo:
        largest = max(message.photo, key=lambda p: p.width * p.height)
        found.append(_file(largest, "image", mime="image/jpeg"))
    if (animation := message.animation) is not None:
        found.append(_file(animation, "animation", animation.file_name, animation.mime_type))
    elif (document := message.document) is not None:  # an animation is a document too
        found.append(_file(document, "document", document.file_name, document.mime_type))
    if (video := message.video) is not None:
        found.append(_file(video, "video", video.file_name, video.mime_type))
    if message.video_note is not None:
        found.append(_file(message.video_note, "video", mime="video/mp4"))
    if (voice := message.voice) is not None:
        found.append(_file(voice, "audio", "voice", voice.mime_type))
    if (audio := message.audio) is not None:
        found.append(_file(audio, "audio", audio.file_name or audio.title, audio.mime_type))
    if (sticker := message.sticker) is not None:
        found.append(_file(sticker, "sticker", sticker.emoji))
    return found

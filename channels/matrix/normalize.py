"""Matrix room events to ``Inbound``: a pure table keyed by ``msgtype``.

Input is the event as the homeserver sent it (nio's ``event.source``, decrypted when the
room is encrypted) plus a ``RoomView`` of the room's state. Promises:

* only ``m.room.message`` events become messages; edits (``m.replace``), the bot's own
  events, notices (``m.notice``: bots must not answer them, the Matrix convention that
  keeps two bots from talking forever), state and reactions give ``None``;
* a redaction (``m.room.redaction``; the redacted event id in ``redacts``, top level
  before room version 11, in ``content`` since) becomes ``kind="deletion"`` with
  ``original_id``: the memory layer redacts that message's words;
* ``is_group`` comes from membership (joined + invited members), never from the room
  name: a room of the bot and one person is a DM (what ``m.direct`` marks), a room with a
  third member is a group whatever its flags, since everyone in it reads it;
* mentions: ``m.mentions.user_ids`` decides when the sender's client sent it (spec
  v1.7); otherwise a pill (``matrix.to`` link) to the bot, its user id, or its display
  name as a whole word in the body;
* threads (``m.thread``) give ``thread_id`` = the thread root; replies
  (``m.in_reply_to``, not a thread's fallback) give ``reply_to_id`` and the quoted text of
  the reply fallback, which is stripped from ``text``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from channels.matrix.media import attachment_url
from channels.models import Attachment, Inbound, trim_raw

#: power level Matrix clients label "Admin" (the room creator's default)
ADMIN_POWER = 100

_MEDIA = {"m.image": "image", "m.video": "video", "m.audio": "audio", "m.file": "document"}
_TEXT = ("m.text", "m.emote")


@dataclass(frozen=True)
class BotIdentity:
    user_id: str
    display_name: str | None = None


@dataclass(frozen=True)
class RoomView:
    """What normalization needs of a room's state."""

    room_id: str
    name: str | None
    #: joined + invited members, the bot included
    members: int
    display_names: Mapping[str, str] = field(default_factory=dict)
    power: Mapping[str, int] = field(default_factory=dict)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_QUOTED_SENDER = re.compile(r"^(?:\* )?<(@[^>\s]+)>\s?")


@dataclass(frozen=True)
class Fallback:
    """A reply fallback taken out of a plain body (spec v1.12 "Fallbacks for rich
    replies"; v1.13 deprecates them, so newer clients send none)."""

    text: str
    quoted: str | None = None
    quoted_sender: str | None = None


def strip_reply_fallback(body: str) -> Fallback:
    """Remove a reply fallback (leading "> " lines then a blank line) from a body."""
    lines = body.split("\n")
    quoted: list[str] = []
    i = 0
    while i < len(lines) and lines[i].startswith(">"):
        quoted.append(lines[i][1:].lstrip(" "))
        i += 1
    if not quoted or (i < len(lines) and lines[i] != ""):
        return Fallback(body)
    rest = "\n".join(lines[i + 1 :])
    who = _QUOTED_SENDER.match(quoted[0])
    first = quoted[0][who.end() :] if who else quoted[0]
    text = "\n".join([first, *quoted[1:]]).strip() or None
    return Fallback(rest, text, who.group(1) if who else None)


def _mentions(content: dict[str, Any], text: str, bot: BotIdentity, by_name: bool) -> bool:
    explicit = content.get("m.mentions")
    if isinstance(explicit, dict):
        users = explicit.get("user_ids")
        return isinstance(users, list) and bot.user_id in users
    formatted = str(content.get("formatted_body") or "")
    pill = re.compile(r"https://matrix\.to/#/" + re.escape(bot.user_id).replace("@", "(?:@|%40)"))
    if pill.search(formatted) or bot.user_id in text:
        return True
    name = (bot.display_name or "").strip()
    if by_name and name:
        return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None
    return False


def _attachment(event_id: str, msgtype: str, content: dict[str, Any]) -> Attachment:
    info = _dict(content.get("info"))
    size = info.get("size")
    filename = content.get("filename") or content.get("body")
    return Attachment(
        id=event_id,
        type=_MEDIA[msgtype],
        name=str(filename) if filename else None,
        size=size if isinstance(size, int) else None,
        mime=str(info["mimetype"]) if info.get("mimetype") else None,
        url=attachment_url(content),  # mxc://, plus the key of encrypted media
    )


def normalize_event(
    event: Mapping[str, Any],
    room: RoomView,
    bot: BotIdentity,
    account: str = "default",
    *,
    display_name_mentions: bool = True,
) -> Inbound | None:
    """The ``Inbound`` for one timeline event, or None when it is not a message for us."""
    sender, event_id = event.get("sender"), event.get("event_id")
    if not isinstance(sender, str) or not isinstance(event_id, str) or sender == bot.user_id:
        return None
    sender_name = room.display_names.get(sender) or sender
    is_admin = room.power.get(sender, 0) >= ADMIN_POWER
    if event.get("type") == "m.room.redaction":
        redacts = event.get("redacts") or _dict(event.get("content")).get("redacts")
        if not isinstance(redacts, str) or not redacts:
            return None
        return Inbound(channel="matrix", account=account, chat_id=room.room_id,
                       chat_name=room.name, is_group=room.members > 2, sender_id=sender,
                       sender_name=sender_name, message_id=event_id, text="", kind="deletion",
                       original_id=redacts, is_admin=is_admin)
    if event.get("type") != "m.room.message" or "state_key" in event:
        return None
    content = _dict(event.get("content"))
    msgtype = content.get("msgtype")
    relates = _dict(content.get("m.relates_to"))
    if relates.get("rel_type") == "m.replace" or not isinstance(msgtype, str):
        return None  # an edit; or a redacted message (empty content)
    if msgtype not in _TEXT and msgtype not in _MEDIA:
        return None  # m.notice (bots), m.location, m.key.verification.request, ...
    body = str(content.get("body") or "")
    thread_id = str(relates["event_id"]) if relates.get("rel_type") == "m.thread" else None
    in_reply = _dict(relates.get("m.in_reply_to")).get("event_id")
    falling_back = thread_id is not None and relates.get("is_falling_back") is True
    reply_to_id = str(in_reply) if in_reply and not falling_back else None
    fallback = strip_reply_fallback(body) if in_reply else Fallback(body)
    body = fallback.text
    attachments: list[Attachment] = []
    if msgtype in _MEDIA:
        attachments.append(_attachment(event_id, msgtype, content))
        # a caption is a body that differs from the file name (spec v1.10)
        filename = content.get("filename")
        body = body if filename and filename != body else ""
    if msgtype == "m.emote":
        body = f"* {sender_name} {body}"
    ts = event.get("origin_server_ts")
    extra: dict[str, Any] = {}
    if isinstance(ts, int):
        extra["received_at"] = datetime.fromtimestamp(ts / 1000, UTC)
    mentioned = _mentions(content, body, bot, display_name_mentions) or (
        "m.mentions" not in content and fallback.quoted_sender == bot.user_id
    )
    return Inbound(
        channel="matrix",
        account=account,
        chat_id=room.room_id,
        chat_name=room.name,
        thread_id=thread_id,
        is_group=room.members > 2,
        sender_id=sender,
        sender_name=sender_name,
        message_id=event_id,
        text=body,
        reply_to_id=reply_to_id,
        reply_to_text=fallback.quoted if reply_to_id else None,
        mentions_bot=mentioned,
        is_admin=is_admin,
        attachments=attachments,
        raw=trim_raw(dict(event)),
        **extra,
    )

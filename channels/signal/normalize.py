"""signal-cli ``receive`` events to ``Inbound``.

An event is what signal-cli's ``JsonReceiveMessageHandler`` writes: ``{"account",
"envelope": {"sourceNumber", "sourceUuid", "sourceName", "timestamp", ...,
"dataMessage" | "syncMessage" | "receiptMessage" | "typingMessage" | ...},
"exception"?}``. Only ``dataMessage`` envelopes become messages. Deliberate drops (each
has a fixture in tests/channels/fixtures/signal):

* receipts, typing indicators, calls, stories: not conversation;
* reactions, remote deletes, expiry-timer changes, group updates: not new words;
* edits (``editMessage``): the edited message keeps its (author, timestamp) identity,
  a second turn for a typo fix is not what people expect;
* ``syncMessage``: what this account's other devices sent or read; the bot does not
  answer its owner's own messages;
* messages from the account itself.

A Signal message is identified by its author and its sent timestamp (that is what a
quote names), so ``message_id`` is ``"<author>:<timestamp>"`` with the author's ACI
(uuid) when signal-cli knows it, else the number; the inbox dedupes on it. A group is
``chat_id = "group.<base64 group id>"``, a DM is the other person's uuid (or number).
Mentions arrive as U+FFFC placeholders plus a ``mentions`` list (UTF-16 ranges); the
placeholders are replaced with ``@name`` and ``mentions_bot`` comes from the list,
never from the text. Attachments are metadata only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from channels.models import Attachment, Inbound, attachment_type, trim_raw

GROUP_PREFIX = "group."
_DROPPED_DATA_KEYS = ("reaction", "remoteDelete", "pollVote", "pinMessage", "unpinMessage",
                      "adminDelete")


@dataclass(frozen=True)
class BotIdentity:
    """Who "the bot" is: the account's number and, when known, its ACI."""

    number: str
    uuid: str | None = None

    def is_me(self, number: object, uuid: object) -> bool:
        return bool((number and number == self.number) or (uuid and uuid == self.uuid))


def message_id(author: str, timestamp: int) -> str:
    return f"{author}:{timestamp}"


def split_message_id(value: str) -> tuple[str, int] | None:
    """(author, timestamp) of a ``message_id``; None when it is not one of ours."""
    author, _, stamp = value.rpartition(":")
    return (author, int(stamp)) if author and stamp.isdigit() else None


def _attachments(data: dict[str, Any]) -> list[Attachment]:
    out = []
    for item in data.get("attachments") or []:
        if not isinstance(item, dict):
            continue
        mime = str(item.get("contentType") or "application/octet-stream")
        out.append(Attachment(
            id=str(item.get("id") or ""), type=attachment_type(mime), mime=mime,
            name=item.get("filename"),
            size=item["size"] if isinstance(item.get("size"), int) else None,
        ))
    sticker = data.get("sticker")
    if isinstance(sticker, dict):
        out.append(Attachment(id=f"{sticker.get('packId')}:{sticker.get('stickerId')}",
                              type="sticker"))
    return out


def _with_mentions(text: str, mentions: list[Any]) -> str:
    """Replace each mention's UTF-16 range (a U+FFFC placeholder) with ``@name``."""
    units = text.encode("utf-16-le", "surrogatepass")
    spans = sorted(
        (m for m in mentions
         if isinstance(m, dict) and isinstance(m.get("start"), int)
         and isinstance(m.get("length"), int)),
        key=lambda m: int(m["start"]), reverse=True,
    )
    for m in spans:
        start, end = int(m["start"]) * 2, (int(m["start"]) + int(m["length"])) * 2
        if not 0 <= start <= end <= len(units):
            continue
        name = m.get("name") or m.get("number") or str(m.get("uuid") or "someone")[:8]
        units = units[:start] + f"@{name}".encode("utf-16-le") + units[end:]
    return units.decode("utf-16-le", "surrogatepass")


def normalize_event(event: dict[str, Any], bot: BotIdentity, account: str) -> Inbound | None:
    """The ``Inbound`` for one receive event, or None when it is deliberately dropped.
    Raises ``ValueError`` for an event that is not shaped like signal-cli's."""
    envelope = event.get("envelope")
    if not isinstance(envelope, dict):
        raise ValueError("receive event without an envelope")
    data = envelope.get("dataMessage")
    if not isinstance(data, dict):
        return None  # sync, receipt, typing, call, story, edit
    if any(data.get(key) for key in _DROPPED_DATA_KEYS) or data.get("isExpirationUpdate"):
        return None
    group = data.get("groupInfo") if isinstance(data.get("groupInfo"), dict) else None
    if group is not None and group.get("type") == "UPDATE":
        return None
    number, uuid = envelope.get("sourceNumber"), envelope.get("sourceUuid")
    author = str(uuid or number or "")
    timestamp = envelope.get("timestamp")
    if not author or not isinstance(timestamp, int):
        raise ValueError("receive event without a source or timestamp")
    if bot.is_me(number, uuid):
        return None
    listed = data.get("mentions")
    mentions: list[Any] = listed if isinstance(listed, list) else []
    text = _with_mentions(str(data.get("message") or ""), mentions)
    attachments = _attachments(data)
    if not text.strip() and not attachments:
        return None
    quote = data.get("quote") if isinstance(data.get("quote"), dict) else None
    reply_to_id = reply_to_text = None
    quotes_bot = False
    if quote is not None and isinstance(quote.get("id"), int):
        quoted_author = str(quote.get("authorUuid") or quote.get("authorNumber") or "")
        if quoted_author:
            reply_to_id = message_id(quoted_author, int(quote["id"]))
            reply_to_text = quote.get("text")
            quotes_bot = bot.is_me(quote.get("authorNumber"), quote.get("authorUuid"))
    mentions_bot = quotes_bot or any(
        isinstance(m, dict) and bot.is_me(m.get("number"), m.get("uuid")) for m in mentions
    )
    sender_name = str(envelope.get("sourceName") or number or author)
    if group is not None and group.get("groupId"):
        chat_id, chat_name, is_group = GROUP_PREFIX + str(group["groupId"]), group.get(
            "groupName"), True
    else:
        chat_id, chat_name, is_group = author, sender_name, False
    return Inbound(
        channel="signal", account=account, chat_id=chat_id, chat_name=chat_name,
        is_group=is_group, sender_id=author, sender_name=sender_name,
        message_id=message_id(author, timestamp), text=text, reply_to_id=reply_to_id,
        reply_to_text=reply_to_text, mentions_bot=mentions_bot,
        attachments=attachments, raw=trim_raw(event),
    )

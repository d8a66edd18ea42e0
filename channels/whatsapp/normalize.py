"""Cloud API webhook payloads to ``Inbound`` messages and delivery statuses.

A delivery is ``{"object": "whatsapp_business_account", "entry": [{"id": <WABA>,
"changes": [{"field": "messages", "value": {"metadata": {...}, "contacts": [...],
"messages": [...] | "statuses": [...]}}]}]}`` (Cloud API webhooks reference,
"messages" field). Every entry, change, message and status is read, not only the
first. Inbound normalization is the table ``_CONTENT`` keyed by the message ``type``;
types not in it (reactions, system notices, unsupported, orders, edits and revokes)
are dropped on purpose, with the reason logged at debug level.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from channels.models import Attachment, Inbound, trim_raw

__all__ = ["MalformedPayload", "Parsed", "StatusEvent", "parse_delivery"]

log = logging.getLogger(__name__)

_MEDIA = ("image", "video", "audio", "document", "sticker")


class MalformedPayload(ValueError):
    """The body is JSON but not shaped like a Cloud API webhook delivery."""


@dataclass(frozen=True)
class StatusEvent:
    """One ``statuses[]`` item: what happened to a message the bot sent."""

    message_id: str  # the wamid the send returned
    status: str  # sent | delivered | read | failed (| deleted, warning ...)
    timestamp: int
    recipient_id: str
    tracker: str | None  # biz_opaque_callback_data: "<reply_id>:<chunk index>"
    errors: tuple[str, ...] = ()  # "<code> <title>: <details>"
    error_codes: tuple[int, ...] = ()


@dataclass
class Parsed:
    """Everything one delivery carried for this phone number."""

    messages: list[tuple[Inbound, int]] = field(default_factory=list)  # with its timestamp
    statuses: list[StatusEvent] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)  # every event's, for staleness


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedPayload(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedPayload(f"{what} is not a list")
    return value


def _str(value: Any, what: str) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise MalformedPayload(f"{what} is missing")


def _timestamp(value: Any, what: str) -> int:
    try:
        return int(_str(value, what))
    except ValueError:
        raise MalformedPayload(f"{what} is not a Unix time") from None


# -- message content: the normalization table ------------------------------------------

Content = tuple[str, list[Attachment]]


def _text(msg: dict[str, Any]) -> Content:
    return str(_obj(msg.get("text"), "text").get("body", "")), []


def _media(msg: dict[str, Any]) -> Content:
    kind = str(msg["type"])
    media = _obj(msg.get(kind), kind)
    if kind == "audio" and media.get("voice"):
        kind = "voice"
    attachment = Attachment(
        id=_str(media.get("id"), f"{kind}.id"),
        type=kind,
        name=media.get("filename") if isinstance(media.get("filename"), str) else None,
        mime=media.get("mime_type") if isinstance(media.get("mime_type"), str) else None,
    )
    caption = media.get("caption")
    return (caption if isinstance(caption, str) else ""), [attachment]


def _interactive(msg: dict[str, Any]) -> Content:
    """A tapped reply button or list row arrives as its title: what the user chose."""
    body = _obj(msg.get("interactive"), "interactive")
    for key in ("button_reply", "list_reply"):
        choice = body.get(key)
        if isinstance(choice, dict):
            title = str(choice.get("title", ""))
            description = choice.get("description")
            return (f"{title}\n{description}" if isinstance(description, str) else title), []
    raise MalformedPayload(f"interactive reply of type {body.get('type')!r} has no choice")


def _button(msg: dict[str, Any]) -> Content:
    """A template's quick-reply button: ``button.text`` is what the user saw."""
    return str(_obj(msg.get("button"), "button").get("text", "")), []


def _location(msg: dict[str, Any]) -> Content:
    loc = _obj(msg.get("location"), "location")
    label = " ".join(str(loc[k]) for k in ("name", "address") if isinstance(loc.get(k), str))
    where = f"{loc.get('latitude')},{loc.get('longitude')}"
    return (f"[location] {label} ({where})" if label else f"[location] {where}"), []


def _contacts(msg: dict[str, Any]) -> Content:
    names = [str(_obj(_obj(c, "contact").get("name", {}), "contact.name")
                 .get("formatted_name", "?"))
             for c in _list(msg.get("contacts"), "contacts")]
    return f"[shared contact] {', '.join(names)}", []


_CONTENT: dict[str, Callable[[dict[str, Any]], Content]] = {
    "text": _text,
    **dict.fromkeys(_MEDIA, _media),
    "interactive": _interactive,
    "button": _button,
    "location": _location,
    "contacts": _contacts,
}


# -- envelope ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    channel: str
    account: str
    display_number: str  # digits only


def _sender_name(value: dict[str, Any], sender: str) -> str:
    for contact in _list(value.get("contacts"), "contacts"):
        if not isinstance(contact, dict):
            continue
        if sender in (contact.get("wa_id"), contact.get("user_id")):
            name = _obj(contact.get("profile", {}), "profile").get("name")
            if isinstance(name, str) and name:
                return name
    return sender


def _to_inbound(msg: dict[str, Any], value: dict[str, Any], ctx: _Context) -> Inbound | None:
    kind = _str(msg.get("type"), "message.type")
    convert = _CONTENT.get(kind)
    message_id = _str(msg.get("id"), "message.id")
    if convert is None:
        log.debug("whatsapp[%s]: skipped %s message %s", ctx.account, kind, message_id)
        return None
    text, attachments = convert(msg)
    sender = _str(msg.get("from") or msg.get("from_user_id"), "message.from")
    group_id = msg.get("group_id")
    is_group = isinstance(group_id, str) and bool(group_id)
    raw_context = msg.get("context")
    context: dict[str, Any] = raw_context if isinstance(raw_context, dict) else {}
    reply_to = context.get("id") if isinstance(context.get("id"), str) else None
    forwarded = bool(context.get("forwarded") or context.get("frequently_forwarded"))
    to_bot = reply_to is not None and context.get("from") == ctx.display_number
    mention = f"@{ctx.display_number}" in text if ctx.display_number else False
    return Inbound(
        channel=ctx.channel,
        account=ctx.account,
        chat_id=str(group_id) if is_group else sender,
        is_group=is_group,
        sender_id=sender,
        sender_name=_sender_name(value, sender),
        message_id=message_id,
        text=text,
        reply_to_id=reply_to,
        # WhatsApp keeps a forward's origin private: only that it was forwarded is known
        forwarded_from="a forwarded WhatsApp message (origin not shared)" if forwarded else None,
        mentions_bot=to_bot or mention,
        attachments=attachments,
        raw=trim_raw(msg),
    )


def _status(item: dict[str, Any]) -> StatusEvent:
    errors: list[str] = []
    codes: list[int] = []
    for err in _list(item.get("errors"), "status.errors"):
        if not isinstance(err, dict):
            continue
        code = err.get("code")
        if isinstance(code, int):
            codes.append(code)
        data = err.get("error_data")
        details = data.get("details", "") if isinstance(data, dict) else ""
        errors.append(f"{code} {err.get('title', '')}: {details}".strip().rstrip(":"))
    tracker = item.get("biz_opaque_callback_data")
    return StatusEvent(
        message_id=_str(item.get("id"), "status.id"),
        status=_str(item.get("status"), "status.status"),
        timestamp=_timestamp(item.get("timestamp"), "status.timestamp"),
        recipient_id=str(item.get("recipient_id", "")),
        tracker=tracker if isinstance(tracker, str) else None,
        errors=tuple(errors),
        error_codes=tuple(codes),
    )


def _values(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if payload.get("object") != "whatsapp_business_account":
        raise MalformedPayload(f"object is {payload.get('object')!r}, not a WhatsApp account")
    for entry in _list(payload.get("entry"), "entry"):
        for change in _list(_obj(entry, "entry[]").get("changes"), "changes"):
            change = _obj(change, "changes[]")
            if change.get("field") == "messages":
                yield _obj(change.get("value"), "changes[].value")


def parse_delivery(
    payload: dict[str, Any], *, channel: str, account: str, phone_number_id: str
) -> Parsed:
    """Every message and status in one delivery addressed to ``phone_number_id``.

    Raises ``MalformedPayload`` when the structure is not a Cloud API delivery (the
    webhook answers 400). Values for another phone number of the same business
    account are skipped: they belong to another configured account, or to none.
    """
    out = Parsed()
    for value in _values(payload):
        meta = _obj(value.get("metadata"), "metadata")
        if str(meta.get("phone_number_id", "")) != phone_number_id:
            log.debug("whatsapp[%s]: skipped a value for phone number %s", account,
                      meta.get("phone_number_id"))
            continue
        display = "".join(ch for ch in str(meta.get("display_phone_number", "")) if ch.isdigit())
        ctx = _Context(channel, account, display)
        for raw_msg in _list(value.get("messages"), "messages"):
            msg = _obj(raw_msg, "messages[]")
            ts = _timestamp(msg.get("timestamp"), "message.timestamp")
            out.timestamps.append(ts)
            inbound = _to_inbound(msg, value, ctx)
            if inbound is not None:
                sent_at = datetime.fromtimestamp(ts, UTC)
                out.messages.append((inbound.model_copy(update={"received_at": sent_at}), ts))
        for raw_status in _list(value.get("statuses"), "statuses"):
            status = _status(_obj(raw_status, "statuses[]"))
            out.timestamps.append(status.timestamp)
            out.statuses.append(status)
    return out

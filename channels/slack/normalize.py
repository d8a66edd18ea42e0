"""Slack event payloads to ``Inbound``: a table keyed by (event type, subtype).

Pure functions: no I/O. The sender's display name is resolved by the caller (it may
need users.info) and passed in.

Identity: ``message_id`` is the message's ``ts``; with ``chat_id`` (the channel) it
forms ``Inbound.dedupe_id`` = ``slack:<account>:<channel>:<ts>``, i.e. the message's
channel+ts. Slack delivers a mention twice, as ``message`` and ``app_mention`` with
different ``event_id`` but the same channel+ts; both normalize to the same dedupe id
and the same fields (only ``raw`` differs: the mention flag comes from the text, not
the event type), so the gateway inbox keeps one.

Shared messages: "Share message" posts the sharer's comment as ``text`` and the shared
message as an ``attachments`` item marked ``is_share`` / ``is_msg_unfurl`` (with
``author_id``, ``author_name``/``author_subname``, ``channel_id``/``channel_name`` and
the original ``text``). Such an event sets ``forwarded_from`` from those markers and its
``text`` is the comment followed by the shared text: the whole message then counts as
someone else's words (the comment is demoted with it, which errs on the safe side).
Mentions inside the shared text do not set ``mentions_bot``.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from channels.models import Attachment, Inbound, InboundKind, attachment_type, trim_raw

__all__ = [
    "EVENT_TABLE",
    "MalformedEvent",
    "SlackContext",
    "decode_text",
    "event_rule",
    "mentions",
    "message_of",
    "sender_of",
    "slash_to_inbound",
    "to_inbound",
]


@dataclass(frozen=True)
class SlackContext:
    """What normalization needs to know about the receiving bot."""

    channel: str
    account: str
    bot_user_id: str
    bot_name: str | None = None


class Rule(NamedTuple):
    handle: bool
    why: str
    malformed: bool = False


class MalformedEvent(ValueError):
    """A payload that is not a valid Slack event; redelivering it cannot help."""


#: (event type, subtype) -> whether to turn it into an Inbound, and why.
EVENT_TABLE: dict[tuple[str, str | None], Rule] = {
    ("message", None): Rule(True, "a person's message (channel, private channel, DM, group DM)"),
    ("message", "file_share"): Rule(True, "a message with files; files become attachments"),
    ("message", "thread_broadcast"): Rule(True, "a thread reply also shown in the channel"),
    ("message", "me_message"): Rule(True, "a /me message"),
    ("app_mention", None): Rule(
        True, "the bot was mentioned; same channel+ts as the message event, so one dedupe id"
    ),
    ("message", "message_changed"): Rule(
        True,
        "an edit: kind='edit', the new text, original_id = the edited message's ts, "
        "message_id = the event's ts (unique per edit); a change that leaves the text as "
        "it was (a link unfurl) is ignored",
    ),
    ("message", "message_deleted"): Rule(
        True, "a deletion: kind='deletion', original_id = deleted_ts, empty text"
    ),
    ("message", "bot_message"): Rule(
        False, "other bots' messages are ignored so two bots cannot talk in a loop"
    ),
}

_GROUP_CHANNEL_TYPES = {"channel", "group", "mpim"}
_TOKEN = re.compile(r"<([^<>]+)>")


#: subtypes that change an earlier message -> ``Inbound.kind``
_CHANGES: dict[str, InboundKind] = {"message_changed": "edit", "message_deleted": "deletion"}


def message_of(event: dict[str, Any]) -> dict[str, Any]:
    """The message an event is about: the event itself, or for an edit the message as
    it now is, for a deletion the message as it was (``previous_message``), with the
    event's channel and ts. Empty for a change event missing that message."""
    subtype = event.get("subtype")
    if subtype not in _CHANGES:
        return event
    inner = event.get("message" if subtype == "message_changed" else "previous_message")
    if not isinstance(inner, dict):
        return {}
    return {**inner, "channel": event.get("channel"), "channel_type": event.get("channel_type"),
            "ts": event.get("ts"), "original_ts": inner.get("ts")}


def _complete(msg: dict[str, Any], keys: tuple[str, ...], rule: Rule) -> Rule:
    """``rule``, or a malformed one when one of ``keys`` is not a non-empty string."""
    missing = next((k for k in keys if not isinstance(msg.get(k), str) or not msg[k]), None)
    if missing is None:
        return rule
    return Rule(False, f"malformed: missing {missing}", malformed=True)


def _change_rule(event: dict[str, Any], rule: Rule, bot_user_id: str) -> Rule:
    msg = message_of(event)
    if event.get("subtype") == "message_deleted" and not msg:
        # Slack may omit previous_message; the deletion is still worth passing on.
        msg = {"user": "", "channel": event.get("channel"), "ts": event.get("ts"),
               "original_ts": event.get("deleted_ts")}
    if not msg:
        return Rule(False, "malformed: change event without its message", malformed=True)
    own = bool(bot_user_id) and msg.get("user") == bot_user_id
    if msg.get("bot_id") or msg.get("bot_profile") or own:
        return Rule(False, "a change to a bot's message (possibly this one's)")
    previous = event.get("previous_message")
    if event.get("subtype") == "message_changed" and isinstance(previous, dict) and \
            previous.get("text") == msg.get("text"):
        return Rule(False, "a change that kept the text (an unfurl or a reaction count)")
    return _complete(msg, ("channel", "ts", "original_ts"), rule)


def event_rule(event: dict[str, Any], bot_user_id: str) -> Rule:
    """The table's rule for this event, plus the checks no table key can express."""
    kind = str(event.get("type", ""))
    subtype = event.get("subtype")
    rule = EVENT_TABLE.get((kind, subtype if isinstance(subtype, str) else None))
    if rule is None:
        return Rule(False, f"not handled: type={kind!r} subtype={subtype!r}")
    if not rule.handle:
        return rule
    if subtype in _CHANGES:
        return _change_rule(event, rule, bot_user_id)
    if event.get("bot_id") or event.get("bot_profile"):
        return Rule(False, "sent by a bot (possibly this one): ignored to avoid loops")
    if event.get("user") == bot_user_id:
        return Rule(False, "the bot's own message")
    if event.get("hidden"):
        return Rule(False, "hidden message")
    return _complete(event, ("channel", "user", "ts"), rule)


def _rich_text_users(blocks: Any) -> set[str]:
    """User ids of ``{"type": "user"}`` elements anywhere in rich_text blocks."""
    found: set[str] = set()
    stack: list[Any] = [blocks]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if item.get("type") == "user" and isinstance(item.get("user_id"), str):
                found.add(item["user_id"])
            stack.extend(v for v in item.values() if isinstance(v, list | dict))
    return found


def mentions(event: dict[str, Any]) -> set[str]:
    """Users mentioned, as Slack encodes them: ``<@U…>`` / ``<@U…|name>`` tokens in
    the text and ``user`` elements in rich_text blocks."""
    tokens = _TOKEN.findall(str(event.get("text") or ""))
    return _rich_text_users(event.get("blocks")) | {
        token[1:].split("|", 1)[0] for token in tokens if token.startswith("@")}


def decode_text(text: str, ctx: SlackContext) -> str:
    """Slack's escaped text to plain text a model reads: ``<@U1>`` -> ``@U1`` (the
    bot's own id -> ``@<bot name>``), ``<#C1|general>`` -> ``#general``,
    ``<url|label>`` -> ``label (url)``, ``<!here>`` -> ``@here``, entities decoded."""

    def replace(match: re.Match[str]) -> str:
        body = match.group(1)
        target, _, label = body.partition("|")
        if target.startswith("@"):
            uid = target[1:]
            if uid == ctx.bot_user_id and ctx.bot_name:
                return f"@{ctx.bot_name}"
            return f"@{label or uid}"
        if target.startswith("#"):
            return f"#{label or target[1:]}"
        if target.startswith("!"):
            name = target[1:].split("^", 1)[0]
            return label or f"@{name}"
        return f"{label} ({target})" if label and label != target else target

    return html.unescape(_TOKEN.sub(replace, text))


def _attachment(raw: dict[str, Any]) -> Attachment | None:
    file_id = raw.get("id")
    if not isinstance(file_id, str) or not file_id:
        return None
    mime = raw.get("mimetype") if isinstance(raw.get("mimetype"), str) else None
    size = raw.get("size")
    return Attachment(
        id=file_id,
        type=attachment_type(mime),
        name=raw.get("name") if isinstance(raw.get("name"), str) else None,
        size=size if isinstance(size, int) else None,
        mime=mime,
        url=raw.get("url_private") if isinstance(raw.get("url_private"), str) else None,
    )


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def first_name(*values: Any) -> str | None:
    """The first of ``values`` that is a non-blank string, stripped (a display name)."""
    return next((name for name in map(_str, values) if name), None)


def shared_messages(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The attachments that are other messages re-posted (shared or unfurled)."""
    raw = event.get("attachments")
    items: list[Any] = raw if isinstance(raw, list) else []
    return [
        a
        for a in items
        if isinstance(a, dict) and (a.get("is_share") is True or a.get("is_msg_unfurl") is True)
    ]


def shared_origin(share: dict[str, Any]) -> str:
    """A readable origin for one shared message, from Slack's attachment fields only."""
    name = _str(share.get("author_subname")) or _str(share.get("author_name"))
    author_id = _str(share.get("author_id"))
    if author_id:
        who = f"{name} (slack user {author_id})" if name else f"slack user {author_id}"
    else:
        who = name or "someone"
    channel_name = _str(share.get("channel_name"))
    channel_id = _str(share.get("channel_id"))
    if channel_name:
        return f"{who} in #{channel_name}"
    if channel_id:
        return f"{who} in channel {channel_id}"
    return who


def _shared_text(share: dict[str, Any], ctx: SlackContext) -> str:
    text = _str(share.get("text")) or _str(share.get("fallback")) or ""
    return decode_text(text, ctx)


def _is_group(event: dict[str, Any]) -> bool:
    channel_type = event.get("channel_type")
    if isinstance(channel_type, str):
        return channel_type in _GROUP_CHANNEL_TYPES
    # app_mention carries no channel_type; Slack's id prefix tells: D… is a DM.
    return not str(event.get("channel", "")).startswith("D")


def profile_name(event: dict[str, Any]) -> str | None:
    """Display name from the event's own ``user_profile``, when Slack included one."""
    profile = event.get("user_profile")
    if not isinstance(profile, dict):
        return None
    return first_name(*(profile.get(key) for key in ("display_name", "real_name", "name")))


def _timestamp(ts: str) -> datetime:
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError):
        return datetime.now(UTC)


def to_inbound(event: dict[str, Any], ctx: SlackContext, sender_name: str) -> Inbound | None:
    """The Inbound for a message-like event, or None when the table says ignore it. An
    edit or a deletion (``_CHANGES``) names the changed message in ``original_id`` and
    carries no files, shares or reply; a deletion no text either."""
    if not event_rule(event, ctx.bot_user_id).handle:
        return None
    change = _CHANGES.get(str(event.get("subtype")))
    msg = message_of(event) or {"ts": event.get("ts"), "original_ts": event.get("deleted_ts")}
    ts = str(event["ts"])
    thread_ts = msg.get("thread_ts") if isinstance(msg.get("thread_ts"), str) else None
    raw_files = event.get("files") if change is None else None
    files: list[Any] = raw_files if isinstance(raw_files, list) else []
    attachments = [a for f in files if isinstance(f, dict) and (a := _attachment(f))]
    text = decode_text(str(msg.get("text") or ""), ctx) if change != "deletion" else ""
    shares = shared_messages(event) if change is None else []
    if shares:
        text = "\n\n".join(p for p in [text, *(_shared_text(a, ctx) for a in shares)] if p)
    return Inbound(
        channel=ctx.channel,
        account=ctx.account,
        chat_id=str(event["channel"]),
        thread_id=thread_ts,
        is_group=_is_group(event),
        sender_id=str(msg.get("user") or ""),
        sender_name=sender_name,
        message_id=ts,
        text=text,
        kind=change or "message",
        original_id=str(msg["original_ts"]) if change else None,
        # A thread reply answers the thread's parent; Slack has no other reply-to.
        reply_to_id=thread_ts if change is None and thread_ts and thread_ts != ts else None,
        forwarded_from="; ".join(shared_origin(a) for a in shares) or None,
        mentions_bot=change != "deletion" and ctx.bot_user_id in mentions(msg),
        attachments=attachments,
        received_at=_timestamp(ts),
        raw=trim_raw(event),
    )


def sender_of(event: dict[str, Any]) -> str:
    """The user id behind a message-like event ("" for a deletion Slack sent without
    the deleted message)."""
    return str(message_of(event).get("user") or "")


def slash_to_inbound(body: dict[str, Any], ctx: SlackContext, sender_name: str) -> Inbound:
    """A slash command payload (``/claw status now``) as a command Inbound: ``command``
    is the first word of the text ("help" when empty), ``text`` reads
    ``/<command> <rest>``; ``message_id`` is Slack's ``trigger_id`` (a slash command is
    not a message and has no ts). Raises ``MalformedEvent`` when a field is missing."""
    for key in ("channel_id", "user_id", "trigger_id"):
        if not isinstance(body.get(key), str) or not body.get(key):
            raise MalformedEvent(f"slash command without {key}")
    words = str(body.get("text") or "").split(maxsplit=1)
    name = words[0].lstrip("/").lower() if words else "help"
    rest = words[1] if len(words) == 2 else ""
    channel = str(body["channel_id"])
    return Inbound(
        channel=ctx.channel,
        account=ctx.account,
        chat_id=channel,
        chat_name=_str(body.get("channel_name")),
        is_group=not channel.startswith("D"),
        sender_id=str(body["user_id"]),
        sender_name=sender_name,
        message_id=str(body["trigger_id"]),
        text=f"/{name} {rest}".strip(),
        command=name,
        mentions_bot=True,  # a slash command is addressed to this app
        raw=trim_raw({k: v for k, v in body.items() if k not in ("token", "response_url")}),
    )

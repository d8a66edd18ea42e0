"""The one envelope every adapter produces and consumes.

Fields are JSON-only so a message crosses Redis and RQ's JSON serializer unchanged
(``model_dump(mode="json")`` / ``model_validate``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Raw payloads are kept for debugging only; anything bigger is cut so one noisy
#: platform event cannot bloat a mailbox.
RAW_LIMIT_BYTES = 4096


class Attachment(BaseModel):
    """A file or media item, as metadata only (downloading happens elsewhere)."""

    model_config = ConfigDict(frozen=True)

    id: str
    type: str  # "image", "video", "audio", "document", "sticker", ...
    name: str | None = None
    size: int | None = None
    mime: str | None = None
    url: str | None = None
    #: Set by the gateway's media job before the turn sees the message: the file in the
    #: group's ``attachments/`` (``<sha256>.<ext>``; ``mime``/``size`` then are the
    #: sniffed ones), or why it was not kept ("too large", "type", ...).
    stored: str | None = None
    refused: str | None = None
    #: Set by the media job for a stored voice note or audio file: what it said, as the
    #: turn and the episode show it ("voice note, transcribed: ..."), or why it has no
    #: text. The sender's words as a machine heard them: the sender's trust.
    transcript: str | None = None


def attachment_type(mime: str | None) -> str:
    """The ``Attachment.type`` of a file of MIME type ``mime``: its major type for an
    image, a video or audio, else "document"."""
    major = (mime or "").split("/", 1)[0]
    return major if major in ("image", "video", "audio") else "document"


#: What an inbound event is: a new message, an edit of an earlier one (``text`` is the
#: new text), or a deletion of an earlier one (``text`` is empty).
InboundKind = Literal["message", "edit", "deletion"]


class Inbound(BaseModel):
    """One message received from a platform, normalized.

    For an edit or a deletion, ``original_id`` is the platform id of the message that
    was changed, and ``message_id`` names this event (unique per edit, so the dedupe key
    never collides with the original message's).
    """

    model_config = ConfigDict(frozen=True)

    channel: str  # platform name: "telegram", "slack", "local", ...
    account: str = "default"  # which configured bot account received it
    chat_id: str
    chat_name: str | None = None
    thread_id: str | None = None
    is_group: bool
    sender_id: str
    sender_name: str
    message_id: str  # the platform's id; the dedupe key
    text: str
    kind: InboundKind = "message"
    original_id: str | None = None  # the edited/deleted message's id (kind != "message")
    #: A command in the platform's own form, recognised by the adapter from structure
    #: (a Telegram ``bot_command`` entity addressed to this bot, a Slack slash command
    #: event, a Discord application command): its name, lowercase, without "/" or
    #: "@bot". ``text`` then reads "/<command> <arguments>". None: no native command;
    #: the gateway may still parse plain "/cmd" text (gateway/intake/_commands.py).
    command: str | None = None
    reply_to_id: str | None = None
    reply_to_text: str | None = None
    #: Set when the message re-posts somebody else's content (a Telegram forward, a
    #: Discord forward, a Slack shared message): a human-readable origin such as
    #: "Alice (telegram user 42)" or "channel #news". Filled by the adapter from the
    #: platform's own forward markers, never from the text. ``text`` then holds the
    #: forwarded text as the platform delivers it, so it is someone else's words and
    #: carries quoted trust whatever the forwarder's role.
    forwarded_from: str | None = None
    mentions_bot: bool = False
    is_admin: bool = False  # sender is an admin of the chat, as the platform says
    #: Whether the platform vouches for ``sender_id``. Chat platforms authenticate their
    #: users; mail does only when the receiving server's verdict says so (DMARC). An
    #: unauthenticated sender is nobody the gateway knows: no allowlist, pairing or role.
    authenticated: bool = True
    attachments: list[Attachment] = Field(default_factory=list)
    received_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    raw: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _edits_name_their_original(self) -> Inbound:
        if self.kind != "message" and not self.original_id:
            raise ValueError(f"an inbound {self.kind} needs original_id")
        return self

    @property
    def group(self) -> str:
        return group_key(self.channel, self.chat_id)

    def as_edit(self, stamp: int) -> Inbound:
        """This message as the edit that gave it its text: ``original_id`` is its id,
        ``message_id`` ``<id>:edit:<stamp>`` (the edit's time), unique per edit."""
        return self.model_copy(update={"kind": "edit", "original_id": self.message_id,
                                       "message_id": f"{self.message_id}:edit:{stamp}"})

    @property
    def sender_key(self) -> str:
        """``<channel>:<sender id>``: the sender as ``[policy] admins``, allowlists,
        pairing and identity links name them (the same id on every account)."""
        return f"{self.channel}:{self.sender_id}"

    @property
    def dedupe_id(self) -> str:
        """Unique per platform message across accounts and chats."""
        return f"{self.channel}:{self.account}:{self.chat_id}:{self.message_id}"


class Outbound(BaseModel):
    """One reply to send. ``reply_id`` makes sending idempotent across retries."""

    model_config = ConfigDict(frozen=True)

    channel: str
    account: str = "default"
    chat_id: str
    thread_id: str | None = None
    text: str
    reply_to_id: str | None = None
    reply_id: str

    @property
    def group(self) -> str:
        return group_key(self.channel, self.chat_id)


def group_key(channel: str, chat_id: str) -> str:
    """The one place a group's identity is derived: ``<channel>:<chat_id>``.

    Threads share their parent chat's group (and so its memory and its order).
    The key is an identifier, not a path: ``memory_store`` sanitizes it into one.
    """
    if not channel or ":" in channel:
        raise ValueError(f"invalid channel name {channel!r}")
    if not chat_id:
        raise ValueError("empty chat id")
    return f"{channel}:{chat_id}"


def trim_raw(raw: dict[str, Any], limit: int = RAW_LIMIT_BYTES) -> dict[str, Any]:
    """Keep a raw payload only while it is small; otherwise keep its top-level keys."""
    import json

    try:
        encoded = json.dumps(raw, default=str)
    except (TypeError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return {"_unserializable": True}
    if len(encoded) <= limit:
        result: dict[str, Any] = json.loads(encoded)
        return result
    return {"_truncated": True, "keys": sorted(str(k) for k in raw)[:50]}

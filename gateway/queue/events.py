"""Outbox events: the one place their shape is built and read.

An entry of the ``outbox`` stream has two fields: ``type`` (the kind) and ``data`` (a
JSON object that always names the chat: ``channel``, ``account``, ``chat_id``,
``thread_id``). The kinds:

* ``typing``: a turn started (the chat shows the typing indicator);
* ``reply``: an ``Outbound`` (``channels.models``), sent chunk by chunk;
* ``file``: a file for the chat (``send_file``): an ``Outbound`` whose ``text`` is the
  caption and whose ``reply_id`` makes it once, plus ``file``: the ``sha256`` naming the
  stored copy under the chat's group dir (``outbox_files/<sha256>``, never a path),
  the ``name`` shown and the ``size``;
* ``done``: a turn (or a front-desk answer) finished: ``message_ids`` it covered, the
  ``reply_id`` it published (or null), the ``turn_id`` (a worker's turns).

Everything that writes the stream builds its events here, the Lua scripts included:
they get each event's whole field list (``OutboxEvent.lua_arg``) and only unpack it
into their ``XADD``, so a kind or field added later is added here alone. The gateway's
outbox reads entries with ``read_event``. This module imports nothing of ``channels``
(``gateway.queue`` is the contract): a reply arrives as any pydantic model of the
``Outbound`` shape, and the chat as anything that has the four address attributes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: the stream fields of every entry
FIELD_TYPE = "type"
FIELD_DATA = "data"
#: the kinds
TYPING = "typing"
REPLY = "reply"
DONE = "done"
FILE = "file"
KINDS = (TYPING, REPLY, DONE, FILE)
#: the folder of a group's dir where a ``file`` event's bytes wait (``<sha256>``)
FILES_FOLDER = "outbox_files"


class ChatAddress(Protocol):
    """Where an event goes: an ``Inbound`` or an ``Outbound`` has all four."""

    @property
    def channel(self) -> str: ...
    @property
    def account(self) -> str: ...
    @property
    def chat_id(self) -> str: ...
    @property
    def thread_id(self) -> str | None: ...


class ReplyModel(ChatAddress, Protocol):
    """An ``Outbound``: its JSON is the ``reply`` event's data."""

    def model_dump_json(self) -> str: ...


class MalformedEvent(ValueError):
    """An outbox entry that is not an event of this module's shape."""


@dataclass(frozen=True)
class OutboxEvent:
    """One outbox entry: its ``kind`` and its ``data`` as the JSON text stored."""

    kind: str
    data: str

    def fields(self) -> dict[str, str]:
        """The stream fields, for ``XADD`` from Python."""
        return {FIELD_TYPE: self.kind, FIELD_DATA: self.data}

    def lua_arg(self) -> str:
        """The field list as one script argument: the scripts ``XADD`` it with
        ``unpack(cjson.decode(arg))``."""
        return json.dumps([FIELD_TYPE, self.kind, FIELD_DATA, self.data])

    def payload(self) -> dict[str, Any]:
        """``data`` decoded."""
        out = json.loads(self.data)
        if not isinstance(out, dict):
            raise MalformedEvent("event data is not a JSON object")
        return out

    @property
    def chat(self) -> tuple[str, str, str]:
        """(channel, account, chat id): the outbox keeps each chat's events in order."""
        d = self.payload()
        return str(d["channel"]), str(d.get("account", "default")), str(d["chat_id"])


def as_str(value: Any) -> str:
    """A Redis reply as ``str`` whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


def address(chat: ChatAddress) -> dict[str, Any]:
    return {"channel": chat.channel, "account": chat.account, "chat_id": chat.chat_id,
            "thread_id": chat.thread_id}


def typing(chat: ChatAddress) -> OutboxEvent:
    return OutboxEvent(TYPING, json.dumps(address(chat)))


def reply(msg: ReplyModel) -> OutboxEvent:
    return OutboxEvent(REPLY, msg.model_dump_json())


def file(msg: ReplyModel, sha256: str, name: str, size: int) -> OutboxEvent:
    """A file for ``msg``'s chat; ``msg.text`` is its caption."""
    data = json.loads(msg.model_dump_json())
    data["file"] = {"sha256": sha256, "name": name, "size": size}
    return OutboxEvent(FILE, json.dumps(data))


def done(chat: ChatAddress, message_ids: Sequence[str], reply_id: str | None,
         turn_id: str | None = None) -> OutboxEvent:
    """The end of a turn over ``message_ids``; ``turn_id`` only for a worker's turn."""
    data: dict[str, Any] = {**address(chat), "message_ids": list(message_ids),
                            "reply_id": reply_id}
    if turn_id is not None:
        data["turn_id"] = turn_id
    return OutboxEvent(DONE, json.dumps(data))


def read_event(fields: Mapping[Any, Any]) -> OutboxEvent:
    """An entry's fields (``str`` or ``bytes``) as an event. Raises ``MalformedEvent``
    when the type, the data or the chat it names is missing (an unknown kind is read:
    the outbox logs and drops it)."""
    event = {as_str(k): as_str(v) for k, v in fields.items()}
    if FIELD_TYPE not in event or FIELD_DATA not in event:
        raise MalformedEvent("an outbox entry needs 'type' and 'data'")
    out = OutboxEvent(event[FIELD_TYPE], event[FIELD_DATA])
    try:
        out.chat  # noqa: B018 (the check: every event names its chat)
    except (ValueError, KeyError, TypeError) as err:
        raise MalformedEvent(f"event data does not name its chat: {err}") from None
    return out

"""The links a deletion follows: which of a group's messages quoted the deleted one, so
that what was drawn from them is retired with it.

A message quoted the deleted one when its own episode line holds its words, or when it
was a reply showing the deleted message's text (``quotes`` in the episode's front
matter: message id -> the id it quoted, written by ``workers.turn``), or a reply
showing one of the bot's replies that repeated its words (``replied``: the platform ids
of those replies, which only the queue knows; ``replies_holding`` says which turns'
replies they are).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from memory_store._protocol import MemoryRecord
from memory_store.files._episode_lines import episode_ids as _ids
from memory_store.files._episode_lines import message_texts, of_chat
from memory_store.maintenance._words import WordFinder

if TYPE_CHECKING:
    from memory_store._base import BaseMemory

_EPISODES = {"kind": "episode", "include_superseded": True}


def replies_holding(mem: BaseMemory, pat: WordFinder, chat: str | None = None) -> list[str]:
    """The episodes (turn ids) whose bot reply holds ``pat``; with ``chat``, only that
    chat's (in a person's memory: a reply's platform id means a reply in its own chat)."""
    return [rec.id for rec in mem.records(_EPISODES)
            if of_chat(rec, chat) and pat.search(_reply(rec))]


def _reply(rec: MemoryRecord) -> str:
    """An episode's bot reply: what follows its last message line (``Bot: ...``)."""
    spans = message_texts(rec.content, _ids(rec))
    return rec.content[max((end for _, end in spans.values()), default=0):]


def quoting_messages(mem: BaseMemory, message_id: str, pat: WordFinder,
                     replied: Collection[str] = (), chat: str | None = None) -> set[str]:
    """The ids of the messages that quoted ``message_id``: their own line holds
    ``pat``, or they quoted it or one of ``replied`` (module docstring). With ``chat``
    (a person's memory, which several chats write), only that chat's messages: a reply
    quotes within its own chat, and ids are unique only there."""
    quoted = {message_id, *replied}
    out: set[str] = set()
    for rec in mem.records(_EPISODES):
        if not of_chat(rec, chat):
            continue
        links = rec.metadata.get("quotes")
        if isinstance(links, dict):
            out |= {str(mid) for mid, to in links.items() if str(to) in quoted}
        for mid, (start, end) in message_texts(rec.content, _ids(rec)).items():
            if mid != message_id and pat.search(rec.content[start:end]):
                out.add(mid)
    out.discard(message_id)
    return out

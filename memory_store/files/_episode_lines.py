"""The lines of an episode file: which span of its body is which message's text.

An episode body (``workers.turn.episode_text``) is a header line, one line per message
(``- [YYYY-MM-DD HH:MM:SS] name (sender id)[ (context)]: text``) and the bot's reply
(``Bot: ...``). The line's head is structure: what a redaction removes is in the texts
and the reply (``scrub_episode``), never in a date, a name or an id of a head, which
would leave the line unreadable for the next redaction or edit.
"""

from __future__ import annotations

import re
from typing import Any

from memory_store._protocol import MemoryRecord
from memory_store.maintenance._words import scrub_value

#: a message line of an episode (``workers.turn.episode_text``):
#: ``- [YYYY-MM-DD HH:MM:SS] name (sender id)[ (context)]: text``
_LINE = re.compile(r"^- \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] [^\n]*?\((?P<sender>[^()\n]*)\)"
                   r"(?: \(context\))?: ", re.MULTILINE)
_BOT = re.compile(r"^Bot: ", re.MULTILINE)


def message_texts(body: str, message_ids: list[str]) -> dict[str, tuple[int, int]]:
    """The span of each message's text in an episode body, by message id. Empty when
    the lines cannot be matched to the ids one to one (a hand-edited episode, a text
    that itself looks like a message line): nothing is guessed."""
    starts = list(_LINE.finditer(body))
    if len(starts) != len(message_ids):
        return {}
    bot = [m.start() for m in _BOT.finditer(body)]
    spans: dict[str, tuple[int, int]] = {}
    for i, (mid, m) in enumerate(zip(message_ids, starts, strict=True)):
        end = starts[i + 1].start() if i + 1 < len(starts) else \
            next((b for b in bot if b > m.end()), len(body))
        spans[str(mid)] = (m.end(), m.end() + len(body[m.end():end].rstrip("\n")))
    return spans


def episode_ids(record: MemoryRecord) -> list[str]:
    """The message ids an episode covers (``message_ids``), as strings."""
    raw = record.metadata.get("message_ids") or []
    return [str(x) for x in raw] if isinstance(raw, list) else []


def source_chat(source: str) -> str | None:
    """The chat a record's ``source`` names (``<chat>:msg/<ids>``, as every writer of
    message ids sets it), or None."""
    head, sep, _ = source.rpartition(":msg/")
    return head if sep and head else None


def of_chat(record: MemoryRecord, chat: str | None) -> bool:
    """Whether ``record`` came from ``chat`` (None: any; a group's own memory)."""
    return chat is None or source_chat(record.source) == chat


def chat_ids(record: MemoryRecord, chat: str | None) -> list[str]:
    """The message ids ``record`` covers that are ``chat``'s (None: all of them). Ids
    are each platform's, unique within one chat only, and a linked person's memory is
    written by several chats: there an id means a message only with the chat its
    record's source names (none for a record that names no chat)."""
    return episode_ids(record) if of_chat(record, chat) else []


def line_sender(body: str, span: tuple[int, int]) -> str | None:
    """The sender id of the episode line whose text starts at ``span``."""
    return next((m.group("sender") for m in _LINE.finditer(body) if m.end() == span[0]), None)


def scrub_episode(body: str, message_ids: list[str], pat: Any, repl: str) -> str:
    """``body`` with ``pat`` (a ``memory_store.maintenance.WordFinder``) replaced by ``repl`` in
    the messages' texts and the bot's reply only; in all of it when its lines cannot be
    matched to ``message_ids`` (nothing is guessed)."""
    spans = sorted(message_texts(body, message_ids).values())
    if not spans:
        out: str = scrub_value(body, pat, repl)
        return out
    parts: list[str] = []
    last = 0
    for start, end in spans:
        parts += [body[last:start], scrub_value(body[start:end], pat, repl)]
        last = end
    parts.append(scrub_value(body[last:], pat, repl))  # the reply
    return "".join(parts)

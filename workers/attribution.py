"""Where a stored fact came from, and how far it may be trusted: from structure only.

The model names a message id for each fact it stores; that citation is a claim, never
proof. A fact's trust is at most that of the least-trusted message that could have
introduced it:

- the messages that asked (the ones that engaged the bot): a member who asks the bot to
  "remember that the operator said X" gets X stored at member trust, whatever it cites;
- the cited message, but only when the fact's words are found in it (``found_in``);
  otherwise any message of the batch could be the source, so all of them count.

So a member's claim cited as the operator's message id keeps member trust: the
operator's message does not contain it. The same rule serves every writer of facts (the
``remember`` tool, core-memory promotion, extraction).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from channels.models import Inbound
from memory_store.ranking import STOPWORDS
from workers.prompt import QUOTED_TRUST, content_trust, engaged_ids

_WORD = re.compile(r"\w+", re.UNICODE)
#: Shared prefix that makes two words the same word ("likes"/"like", "moved"/"move").
_STEM = 4
_SUFFIX = 3


@dataclass(frozen=True)
class Attribution:
    """The messages a fact may have come from, and the trust that follows."""

    source: str
    message_ids: list[str]
    participants: list[str]
    trust: float
    #: The pool that decided the trust: the askers plus the cited message or the batch.
    pool: tuple[Inbound, ...]
    #: Whether the fact's words were found in the cited message.
    proven: bool


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.casefold()) if w not in STOPWORDS]


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    # Inflections only ("like"/"likes", "moved"/"moves"): a shared prefix of at least
    # ``_STEM`` letters and short endings. Nothing looser, which a paraphrase could game.
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
             min(len(a), len(b)))
    return n >= _STEM and max(len(a), len(b)) - n <= _SUFFIX


def found_in(fact: str, msg: Inbound, also_named: Collection[str] = ()) -> bool:
    """Whether every content word of ``fact`` occurs in ``msg``'s own text.

    Words naming the sender or the fact's subject (``also_named``) are ignored, since a
    fact restates "I moved" as "Alice moved". A fact with no content word left is not
    found (nothing ties it to the message).
    """
    return words_in(fact, msg.text, (msg.sender_name, *also_named))


def words_in(fact: str, text: str, ignored_names: Collection[str] = ()) -> bool:
    """Whether every content word of ``fact`` (but the names given) occurs in ``text``."""
    ignore = {w for name in ignored_names for w in _words(name)}
    wanted = [w for w in _words(fact) if w not in ignore]
    have = _words(text)
    return bool(wanted) and all(any(_same(w, h) for h in have) for w in wanted)


def attribute(
    *,
    group: str,
    turn_id: str,
    messages: Sequence[Inbound],
    fact: str,
    cited: str | None,
    about: str | None = None,
    engaged: Collection[str] | None = None,
    admins: Collection[str] = (),
) -> Attribution:
    """The attribution of ``fact`` (about ``about``) citing message ``cited`` in a batch."""
    if not messages:
        return Attribution(f"{group}:turn/{turn_id}", [], [], QUOTED_TRUST, (), False)
    asked_ids = engaged_ids(messages, engaged)
    askers = [m for m in messages if m.message_id in asked_ids]
    named = (about,) if about else ()
    hit = [m for m in messages if cited is not None and m.message_id == cited]
    proven = bool(hit) and found_in(fact, hit[0], named)
    origin = hit if proven else list(messages)
    pool = list({id(m): m for m in [*origin, *askers]}.values())  # each message once
    trust = min(content_trust(m, admins) for m in pool)
    # The source names where the words are (the cited message, or the whole batch).
    ids = [m.message_id for m in origin]
    participants = sorted({m.sender_key for m in origin})
    return Attribution(
        source=f"{group}:msg/{','.join(ids)}",
        message_ids=ids,
        participants=participants,
        trust=trust,
        pool=tuple(pool),
        proven=proven,
    )

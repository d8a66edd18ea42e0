"""Memory retrieval for the workers: the one search the turn and the ``search_memory``
tool both call.

``recall(memory, query, k=..., group=..., shared=...)`` cuts the query to
``QUERY_MAX_CHARS``, asks the group's ``Memory`` for its ``k`` best records, and puts
``shared`` first (the profiles members chose to share with a group:
``workers.identity.shared_profiles``). The ranking
itself is the backend's (``[memory.ranking]`` reaches the hybrid backend through
``MemoryConfig.backend_options``). A search that fails (a broken index) returns nothing
but ``shared``: the bot answers from core memory instead of falling silent.
``turn_query`` is what a turn searches for: the text of the messages that engaged it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from channels.models import Inbound
from memory_store import Memory, MemoryRecord

log = logging.getLogger(__name__)

#: A search query is cut to this length (the turn's and the model's alike).
QUERY_MAX_CHARS = 500


def turn_query(messages: Sequence[Inbound], engaged: Collection[str]) -> str:
    """What a turn searches memory for: the engaged messages' text, in order."""
    return " ".join(m.text for m in messages if m.message_id in engaged).strip()


async def recall(memory: Memory, query: str, *, k: int, group: str,
                 shared: Sequence[MemoryRecord] = ()) -> list[MemoryRecord]:
    """``shared`` then the ``k`` best records of ``group``'s ``memory`` for ``query``
    (none when the query is empty or ``k`` is 0)."""
    query = query.strip()[:QUERY_MAX_CHARS]
    if k <= 0 or not query:
        return [*shared]
    try:
        found = await memory.search(query, k=k)
    except Exception as exc:
        # A broken index must not silence the bot: answer from core memory alone.
        log.warning("memory search for %s failed, answering without it: %r", group, exc)
        found = []
    return [*shared, *found]

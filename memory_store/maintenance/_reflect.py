"""Reflection: a failure context in, at most one short lesson out (``reflections/``).

The summarizer is pluggable: the worker passes a callable backed by its model
(``open_memory(..., summarizer=fn)``), sync or async, mapping the context dict to a
lesson or None. Without one, a plain rule applies: a context with an ``error`` (and
optionally ``task`` and ``fix``) yields "When <task>: <error>. Next time: <fix>.".
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from typing import TYPE_CHECKING, Any

from memory_store.maintenance._consolidate import normalized_words

if TYPE_CHECKING:
    from memory_store._base import BaseMemory, Summarizer

LESSON_MAX_CHARS = 600


def rule_summarizer(context: dict[str, Any]) -> str | None:
    """The default: only an explicit error makes a lesson."""
    error = str(context.get("error") or "").strip()
    if not error:
        return None
    task = str(context.get("task") or "").strip()
    fix = str(context.get("fix") or "").strip()
    lesson = f"When {task}: {error}." if task else f"{error}."
    if fix:
        lesson += f" Next time: {fix}."
    return lesson


async def summarize(summarizer: Summarizer, context: dict[str, Any]) -> str | None:
    result = summarizer(context)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return None
    if not isinstance(result, str):
        raise TypeError(f"summarizer returned {type(result).__name__}, expected str or None")
    text = " ".join(result.split())
    return text[:LESSON_MAX_CHARS] or None


async def reflect(mem: BaseMemory, context: dict[str, Any]) -> str | None:
    """Store the lesson of ``context``; returns its memory id, or None (nothing to learn).

    Idempotent: the same lesson (or the same ``turn_id`` in the context) is stored once.
    """
    lesson = await summarize(mem.summarizer or rule_summarizer, context)
    if lesson is None:
        return None
    key = str(context.get("turn_id") or "") or normalized_words(lesson)
    memory_id = "reflection-" + hashlib.sha256(key.encode()).hexdigest()[:20]
    for existing in await asyncio.to_thread(mem.records, {"kind": "reflection"}):
        if normalized_words(existing.content) == normalized_words(lesson):
            return existing.id
    metadata: dict[str, Any] = {
        "id": memory_id,
        "source": str(context.get("source") or "reflect"),
        "trust": float(context.get("trust", 0.5)),
        "actor": "reflect",
    }
    if context.get("turn_id"):
        metadata["turn_id"] = str(context["turn_id"])
    return await mem.write(lesson, kind="reflection", metadata=metadata)

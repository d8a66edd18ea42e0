"""Reflection after a failed turn: at most one short lesson per turn id in ``reflections/``;
and lessons from a person's correction of the bot (``correction_lessons``, at the end).

The turn calls ``reflect_on_failure`` when the model raised a ``TurnError`` and when a
batch is dead-lettered after ``max_attempts``. A permanent error (bad key, rejected
request) is reflected on at once; a transient one (rate limit, outage) only when its
batch is finally dead-lettered, since a retry may well succeed and a lesson per 429 is
noise. The lesson comes from the configured model (the same ``Model`` the turn uses, one
short request); when that fails too (likely, if the model was what failed) the plain
rule of ``memory_store.maintenance._reflect`` writes it instead.

What reaches the model and the file: the group, the turn id, the message ids, the
attempt count, the error class and its message scrubbed of the model key. Never the
key, never message texts. Reflection never raises: a failure in it is logged (scrubbed)
and the turn goes on as it would have without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import redis
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.usage import UsageLimits

from channels.models import Inbound
from channels.redact import redact
from gateway.config import Settings
from gateway.queue import GroupQueue, Keys
from memory_store import BaseMemory, Summarizer
from memory_store.maintenance import rule_summarizer
from workers.agent import TurnError, build_agent
from workers.prompt import content_trust, role_of

log = logging.getLogger(__name__)

#: Seconds the model may take to write a lesson before the plain rule writes it instead.
REFLECT_TIMEOUT = 20.0
#: Bound on the error message carried into the prompt and the lesson.
ERROR_MAX_CHARS = 500
LESSON_MAX_TOKENS = 200
#: What the model answers when there is nothing general to learn.
NOTHING = "NONE"

_INSTRUCTIONS = (
    "You are the reflection step of a chat assistant. A turn of the assistant failed. "
    "From the failure report, write ONE short lesson (at most two sentences) that would "
    "help the assistant or its operator avoid or handle this failure next time. Do not "
    "invent details that are not in the report. If there is nothing general to learn, "
    f"answer exactly {NOTHING}."
)


def failure_context(
    *,
    group: str,
    turn_id: str,
    message_ids: Sequence[str],
    error_class: str,
    error: str,
    attempts: int | None,
    dead: bool,
    secret: str | None,
) -> dict[str, Any]:
    """The context handed to ``Memory.reflect``: what failed, scrubbed of ``secret``."""
    message = " ".join(redact(error, secret).split())[:ERROR_MAX_CHARS]
    what = "was dead-lettered" if dead else "failed"
    return {
        "task": f"answering in {group} (turn {turn_id} {what})",
        "error": f"{error_class}: {message}" if message else error_class,
        "error_class": error_class,
        "group": group,
        "turn_id": turn_id,
        "message_ids": list(message_ids),
        "attempts": attempts,
        "dead_lettered": dead,
        "source": f"reflect:{turn_id}",
    }


def render_report(context: dict[str, Any]) -> str:
    """The failure report the model reads (only the context's own, scrubbed fields)."""
    lines = [
        f"Group: {context['group']}",
        f"Turn: {context['turn_id']}",
        f"Messages: {', '.join(context['message_ids']) or '(none)'}",
    ]
    if context.get("attempts") is not None:
        lines.append(f"Attempts: {context['attempts']}")
    if context.get("dead_lettered"):
        lines.append("Outcome: gave up; the messages were set aside for the operator.")
    lines.append(f"Error: {context['error']}")
    return "\n".join(lines)


def model_summarizer(model: Model, secret: str | None) -> Summarizer:
    """A ``memory_store`` summarizer backed by ``model``: one request, bounded in time,
    falling back to the plain rule when the model fails; its answer is scrubbed too."""
    agent: Agent[None, str] = Agent(model, output_type=str, instructions=_INSTRUCTIONS,
                                    name="pynanoclaw-reflect")

    async def summarize(context: dict[str, Any]) -> str | None:
        try:
            result = await asyncio.wait_for(
                agent.run(render_report(context), usage_limits=UsageLimits(request_limit=1),
                          model_settings={"max_tokens": LESSON_MAX_TOKENS}),
                REFLECT_TIMEOUT,
            )
        except Exception as exc:
            log.warning("reflection model failed (%s); using the plain rule",
                        redact(f"{type(exc).__name__}: {exc}", secret)[:ERROR_MAX_CHARS])
            return rule_summarizer(context)
        text = redact(result.output.strip(), secret)
        if not text or text.strip(" .").upper() == NOTHING:
            return None
        return text

    return summarize


async def reflect_on_failure(
    client: redis.Redis,
    memory: BaseMemory,
    settings: Settings,
    *,
    group: str,
    turn_id: str,
    message_ids: Sequence[str],
    error: BaseException | None = None,
    attempts: int | None = None,
    dead: bool = False,
    prefix: str = "pnc:",
) -> str | None:
    """Reflect on a failed turn; returns the lesson's memory id, or None.

    ``error`` is what the turn raised (recorded, scrubbed, in the turn's Redis hash so
    a later dead-letter can name it); ``dead`` says the batch was just dead-lettered.
    Idempotent per turn id: once a turn was reflected on (lesson or not), later calls
    for it do nothing, and ``memory_store`` dedupes the write by id besides. Never
    raises.
    """
    secret = settings.model.secret
    turns = GroupQueue(client, Keys(prefix), group)
    try:
        if error is not None:
            turns.record_error(turn_id, type(error).__name__,
                               redact(str(error), secret)[:ERROR_MAX_CHARS])
            if not dead and isinstance(error, TurnError) and error.transient:
                return None  # a retry may succeed; the dead-letter reflects if it does not
        if turns.reflected(turn_id):
            return None
        if error is not None:
            error_class, message = type(error).__name__, str(error)
        else:
            error_class, message = turns.last_error(turn_id)
            error_class = error_class or "Unknown"
            message = message or "no error was recorded (the worker may have died)"
        context = failure_context(group=group, turn_id=turn_id, message_ids=message_ids,
                                  error_class=error_class, error=message, attempts=attempts,
                                  dead=dead, secret=secret)
        try:
            summarizer: Summarizer | None = model_summarizer(build_agent(settings).model, secret)
        except Exception as exc:
            log.warning("reflection for %s: no model (%s); using the plain rule", turn_id,
                        redact(f"{type(exc).__name__}: {exc}", secret)[:ERROR_MAX_CHARS])
            summarizer = None
        previous = memory.summarizer
        # Safe to swap on the shared memory: turns of one group never overlap (group lock).
        memory.summarizer = summarizer
        try:
            lesson_id = await memory.reflect(context)
        finally:
            memory.summarizer = previous
        turns.mark_reflected(turn_id, lesson_id)
        if lesson_id:
            log.info("reflection on %s in %s: %s", turn_id, group, lesson_id)
        return lesson_id
    except Exception as exc:
        log.error("reflection on %s in %s failed: %s", turn_id, group,
                  redact(f"{type(exc).__name__}: {exc}", secret)[:ERROR_MAX_CHARS])
        return None


# -- lessons from corrections -------------------------------------------------------------

#: longest lesson drawn from one correction, characters
CORRECTION_LESSON_MAX_CHARS = 400
CORRECTION_TAGS = ("lesson", "correction")


def correction_lessons(
    memory: BaseMemory,
    *,
    group: str,
    turn_id: str,
    messages: Sequence[Inbound],
    corrections: Sequence[tuple[str, str, Sequence[str]]],
    known: Mapping[str, tuple[str, str, float]],
    admins: Collection[str],
    now: datetime,
    secret: str | None,
) -> list[str]:
    """Write one lesson (``reflections/``) per correction of the bot the extraction step
    flagged: ``(message id, lesson, ids of known facts it contradicts)``. Call under the
    group lock; idempotent (ids from the turn and the message).

    The model says only *which* message corrects the bot and what to learn; what the
    lesson is worth comes from structure: the correcting message must be in the batch
    (an unknown id is dropped), and its trust is that message's (``content_trust``: a
    member's correction is stored at member trust, a forwarded one at quoted trust). A
    lesson never supersedes anything; one that contradicts a known fact more trusted
    than its author (what an admin set) is tagged ``disputed`` and says that the other
    record stands. Returns the ids written."""
    by_id = {m.message_id: m for m in messages}
    written: list[str] = []
    for mid, lesson, contradicts in corrections:
        msg = by_id.get(mid)
        text = " ".join(redact(lesson, secret).split())[:CORRECTION_LESSON_MAX_CHARS]
        if msg is None or not text:
            continue
        trust = content_trust(msg, admins)
        outranked = sorted({k for k in contradicts if k in known and known[k][2] > trust})
        tags = [*CORRECTION_TAGS, *(["disputed"] if outranked else [])]
        if outranked:
            text += " (Disputed: a more trusted record says otherwise, and it stands.)"
        written.append(memory.write_sync(text, kind="reflection", metadata={
            "id": f"lesson-{turn_id}-{mid}", "source": f"{group}:msg/{mid}",
            "message_ids": [mid], "trust": trust, "turn_id": turn_id, "tags": tags,
            "lesson_from": "correction", "created": now.isoformat(),
            "corrected_by": f"{msg.sender_name} ({role_of(msg, admins).value})",
            "actor": f"extract:{turn_id}", **({"disputes": outranked} if outranked else {}),
        }))
    return written

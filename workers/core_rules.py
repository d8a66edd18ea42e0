"""Who may put what into core memory: the ``update_core`` tool and its rules.

Core memory (the group's ``CLAUDE.md`` and ``user_profile.md``) is in every prompt and
reads as instructions and context, so entering it takes more than entering ``entities/``.
The file mechanics (markers, bound, atomic write, audit) are ``memory_store.files._coresection``;
the rules are here, decided from structure (``workers.attribution``), never from the
model's say-so:

- the fact's words must be found in the cited message (else it may be tool output, a
  search result or the model's own words: never core), and every message that could have
  introduced it (that one and the ones that asked) must be a sender's own words (no
  quote, no forward) at or above ``CORE_MIN_TRUST``;
- ``CLAUDE.md`` ("instructions"): standing instructions only from the operator, a chat
  admin or the DM owner;
- ``user_profile.md`` ("profile"): what a person says about themselves, at their trust
  (the fact may not name another person of the batch), or what an admin states.

A refused fact can still be stored with ``remember`` (entities/, at its own trust).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Literal

from pydantic_ai import RunContext, Tool

from channels.models import Inbound
from memory_store.files import CORE_FILE, PROFILE_FILE, CoreSectionError, add_agent_entry
from workers.attribution import Attribution, attribute
from workers.prompt import TRUSTED_ROLES, Role, content_trust, role_of
from workers.tools import ABOUT_MAX_CHARS, FACT_MAX_CHARS, TurnDeps, low_source

log = logging.getLogger(__name__)

#: Below this trust nothing enters core memory (quoted, forwarded and tool text is 0.2).
CORE_MIN_TRUST = 0.5
Target = Literal["instructions", "profile"]
FILES: dict[str, str] = {"instructions": CORE_FILE, "profile": PROFILE_FILE}


def _names(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.casefold()) if len(w) > 1}


def is_self_statement(msg: Inbound, about: str) -> bool:
    """Whether ``about`` names ``msg``'s sender (display name or ``channel:id``)."""
    wanted = " ".join(about.split()).casefold()
    return wanted in {
        " ".join(msg.sender_name.split()).casefold(),
        msg.sender_key.casefold(),
    }


def refusal(
    target: str, fact: str, about: str | None, att: Attribution, deps: TurnDeps
) -> str | None:
    """Why ``fact`` may not enter ``target``, or ``None`` when it may."""
    if not att.proven:
        return ("these words are not in the cited message; core memory takes only what "
                "a person wrote themselves")
    if low_source(deps, fact) is not None:
        return ("these words are in tool output or quoted text read this turn; core "
                "memory takes only what a person wrote themselves")
    for m in att.pool:
        if content_trust(m, deps.admins) < CORE_MIN_TRUST:
            return "quoted or forwarded text (or low-trust text) never enters core memory"
    roles = [role_of(m, deps.admins) for m in att.pool]
    if target == "instructions":
        if any(r not in TRUSTED_ROLES for r in roles):
            return ("standing instructions come only from the operator, a chat admin or "
                    "the DM owner")
        return None
    if not about:
        return "say whom the profile fact is about"
    others = set().union(*(_names(m.sender_name) for m in deps.messages
                           if not is_self_statement(m, about)))
    for m, role in zip(att.pool, roles, strict=True):
        if role in TRUSTED_ROLES and role is not Role.OWNER:
            continue  # operator or chat admin: may state facts about anyone
        if not is_self_statement(m, about):
            return "a member's claim about somebody else stays out of the profile"
        if _names(fact) & (others - _names(about)):
            return "a self-statement naming other people stays out of the profile"
    return None


async def update_core(
    ctx: RunContext[TurnDeps],
    fact: str,
    file: Target,
    message_id: str,
    about: str | None = None,
) -> str:
    """Keep a standing instruction or a person's profile fact in core memory (always
    in your context). Only for what the person wrote themselves in the cited message.

    Args:
        fact: one short sentence, e.g. "Answer in Portuguese" or "Alice is vegetarian".
        file: "instructions" for a standing instruction of this chat (operator, chat
            admin or DM owner only), "profile" for a fact about a person.
        message_id: the id of the message whose sender wrote it.
        about: for "profile", the person the fact is about (their display name).
    """
    deps = ctx.deps
    fact = " ".join(fact.split())
    about = " ".join(about.split())[:ABOUT_MAX_CHARS] if about else None
    if not fact or len(fact) > FACT_MAX_CHARS:
        return "Refused: give one short sentence."
    if file not in FILES:
        return 'Refused: file must be "instructions" or "profile".'
    if deps.group_dir is None:
        return "Core memory is not available in this chat."
    if any(secret and secret in f"{fact} {about or ''}" for secret in deps.never_store):
        return "Refused: that text contains a secret and is never stored."
    att = attribute(group=deps.group, turn_id=deps.turn_id, messages=deps.messages,
                    fact=fact, cited=message_id, about=about, engaged=deps.engaged,
                    admins=deps.admins)
    why = refusal(file, fact, about, att, deps)
    if why is not None:
        log.info("turn %s: core %s refused: %s", deps.turn_id, file, why)
        return f"Not kept in core memory: {why}. Use remember() to keep it as a fact."
    named = about is not None and fact.casefold().startswith(about.casefold())
    text = f"{about}: {fact}" if file == "profile" and about and not named else fact
    try:
        added = await asyncio.to_thread(
            add_agent_entry, deps.group_dir, FILES[file], text, source=att.source, trust=att.trust,
            actor=f"agent:{deps.turn_id}", turn_id=deps.turn_id, today=deps.now.date())
    except (CoreSectionError, ValueError) as exc:
        return f"Not kept in core memory: {exc}."
    log.info("turn %s: core %s %s (trust %.2f)", deps.turn_id, FILES[file],
             "added" if added else "unchanged", att.trust)
    return f"Kept in {FILES[file]}." if added else f"Already in {FILES[file]}."


def core_tools() -> list[Tool[TurnDeps]]:
    """The core-memory tool, offered next to ``workers.tools.agent_tools``."""
    return [Tool(update_core, takes_ctx=True)]

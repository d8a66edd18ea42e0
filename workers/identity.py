"""Which memory a turn opens, and what of other people's memory a group turn may see.

* A DM of a person linked across channels (``[identities]`` in the config, or ``/link``)
  opens the person's own directory, ``<data>/persons/<id>/``, shared by all their DMs:
  a fact told on Telegram is found from Slack. Any other chat opens its own directory.
* A group turn never opens a person's directory as its memory. For each sender in the
  batch who said ``/share profile on``, it gets that person's ``user_profile.md`` (and
  nothing else of theirs) as a quoted data record naming its source, at member trust,
  and it competes for the prompt budget like any memory record (``workers.budget``).

The resolution is done here, in the worker, at the turn (not by the gateway into the
envelope): the worker holds the config and Redis (``gateway.queue.identity``), a link
made while a message waits applies to its turn, and the background jobs of a group
(extraction) can derive the same directory from the same batch without the envelope
carrying a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from channels.models import Inbound
from gateway.queue.identity import Identities
from memory_store import GroupDirectory, MemoryRecord, person_key
from memory_store.files import PROFILE_FILE, USER_PROFILE_MD
from workers.prompt import ROLE_TRUST, Role

#: a shared profile is the person's own account of themselves, shown to a group as
#: data: no more trusted than what a member says there
SHARED_PROFILE_TRUST = ROLE_TRUST[Role.MEMBER]
#: characters of one shared profile read at most (the token budget cuts further)
SHARED_PROFILE_MAX_CHARS = 4000


def dm_owner(messages: Sequence[Inbound]) -> str | None:
    """The user key of the one person a DM batch is from; None for a group batch."""
    if not messages or any(m.is_group for m in messages):
        return None
    owners = {m.sender_key for m in messages}
    return owners.pop() if len(owners) == 1 else None


def memory_key(identities: Identities, group: str, messages: Sequence[Inbound]) -> str:
    """The memory a turn of ``group`` over ``messages`` opens: the linked person's
    (``person:<id>``) for their DM, else the group's own."""
    owner = dm_owner(messages)
    person = identities.person_of(owner) if owner is not None else None
    return person_key(person) if person is not None else group


def shared_profiles(identities: Identities, data_dir: Path, messages: Sequence[Inbound]
                    ) -> list[MemoryRecord]:
    """The profiles a group turn over ``messages`` may see (empty for a DM)."""
    if not messages or not any(m.is_group for m in messages):
        return []
    found: list[MemoryRecord] = []
    seen: set[str] = set()
    for m in messages:
        user = m.sender_key
        person = identities.person_of(user)
        if person is None or person in seen or not identities.shares_profile(person):
            continue
        seen.add(person)
        gd = GroupDirectory(data_dir, person_key(person))
        try:
            text = (gd.path / PROFILE_FILE).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            continue
        text = text.strip()[:SHARED_PROFILE_MAX_CHARS]
        if not text or text == USER_PROFILE_MD.strip():
            continue
        now = datetime.now(UTC)
        found.append(MemoryRecord(
            id=f"profile-{person}", kind="profile",
            content=f"Profile {m.sender_name} ({user}) shares with groups:\n{text}",
            source=f"persons/{person}/{PROFILE_FILE} (shared by {user})",
            created=now, updated=now, trust=SHARED_PROFILE_TRUST))
    return found

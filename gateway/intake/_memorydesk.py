"""What the chat command layer may see and ask of a group's memory: ``/memory`` and
``/forget``.

The gateway never writes memory. It reads the group's files directly, read-only (no
lock, no index), to answer ``/memory`` and to preview a ``/forget``; a confirmed
``/forget`` becomes a request in ``forget:{g}`` (JSON: id, phrase, by, at) and a
redaction job (``gateway.queue.enqueue_group_job``, run by ``workers/redaction.py``
under the group lock), which removes the request once applied. Methods are blocking:
the front desk calls them from a thread.
"""

from __future__ import annotations

import json
import logging
import secrets
import time

from rq import Queue

from gateway.config import Settings
from gateway.intake._groupfiles import GroupFiles
from gateway.queue import REDACT_JOB, Keys, as_str, enqueue_group_job
from gateway.queue.identity import Identities
from memory_store import GroupDirectory, MemoryRecord, is_person_key
from memory_store.files import (
    CORE_FILE,
    KIND_DIRS,
    MEMORY_DIRS,
    PROFILE_FILE,
    CoreSectionError,
    agent_entries,
    id_from_filename,
    now_utc,
    parse_memory_file,
    read_regular,
)
from memory_store.maintenance import (
    PHRASE_MIN_CHARS,
    find_phrase,
    scrub_value,
    validated_phrase,
    words_pattern,
)

log = logging.getLogger(__name__)

#: lines a preview or a listing shows before "... and N more"
SHOW = 8
EPISODES_DIR = KIND_DIRS["episode"]
#: characters of a fact shown by ``/memory``
FACT_CHARS = 120
#: what a ``/forget`` preview shows in place of the words, where a memory's id or path
#: holds them
MASK = "***"


def _n(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun`` in the right number: 1 episode, 2 episodes, 2 entities."""
    if count == 1:
        return f"1 {noun}"
    if plural is None:
        consonant_y = noun.endswith("y") and noun[-2:-1] not in tuple("aeiou")
        plural = noun[:-1] + "ies" if consonant_y else noun + "s"
    return f"{count} {plural}"


def _unquoted(phrase: str) -> str:
    """How a reply names the words to forget without repeating them (the reply lands in
    the chat, the outbox stream and Redis's append-only file): their size only."""
    return f"your words ({_n(len(phrase.split()), 'word')}, {_n(len(phrase), 'character')})"


class MemoryDesk:
    """``/memory`` and ``/forget`` for the groups of one gateway."""

    def __init__(self, config: Settings, queue: Queue, keys: Keys) -> None:
        self._cfg = config
        self._files = GroupFiles.of(config)
        self._queue = queue
        self._keys = keys

    def _memories(self, group: str, dm_owner: str | None
                  ) -> list[tuple[str, GroupDirectory]]:
        """The existing directories holding ``group``'s memory. A DM linked to a person
        writes to ``persons/<id>/`` (``workers.identity.memory_key``): those its turns
        wrote to (``Keys.person_memories``, what the redaction job reaches) and, should
        that set be gone with a Redis wipe, the person its owner is linked to now. A
        group chat (no ``dm_owner``) never shows a person's memory."""
        persons: set[str] = set()
        if dm_owner is not None:
            r = self._queue.connection if self._queue is not None else None
            if r is not None:
                persons |= {as_str(m) for m in r.smembers(self._keys.person_memories(group))}
                person = Identities(self._cfg.person_of, r, self._keys).person_of(dm_owner)
            else:  # a desk without Redis (reads only): the config's identities
                person = self._cfg.person_of(dm_owner)
            return self._files.memories(group, persons, person)
        return self._files.memories(group)

    # -- /memory ---------------------------------------------------------------------

    def view(self, group: str, dm_owner: str | None = None) -> str:
        """A short listing of what the bot keeps about ``group``, with sources; for a
        DM (``dm_owner``, the sender) linked to a person, their personal memory too."""
        found = self._memories(group, dm_owner)
        if not found:
            return f"I keep nothing about {group} yet."
        lines = [f"What I keep about {group}:"]
        for key, gd in found:
            listing = self._listing(gd)
            if is_person_key(key):
                lines.append(f"Personal memory ({self._where(gd)}, shared by your linked DMs):")
                listing = listing or ["- nothing yet"]
            lines += listing
        lines.append("/forget <words> removes words from all of it.")
        return "\n".join(lines)

    def _listing(self, gd: GroupDirectory) -> list[str]:
        """The core files, the counts and the recent facts of one directory."""
        lines: list[str] = []
        core = []
        for name in (CORE_FILE, PROFILE_FILE):
            try:
                size = len(read_regular(gd.path / name))
            except FileNotFoundError:
                continue
            try:
                kept = len(agent_entries(gd, name))
            except CoreSectionError:
                kept = 0
            core.append(f"{name} {size} bytes ({kept} entries I added)")
        if core:
            lines.append("- core memory: " + ", ".join(core))
        # Episodes are the bulk (a busy group has tens of thousands): counted from the
        # listing, never parsed; the rest is read for its facts.
        counts = {"episode": sum(1 for _ in gd.memory_files([EPISODES_DIR]))}
        now = now_utc()
        records, retired = [], 0
        for rec in self._records(gd):
            # forgotten or superseded: kept for the audit trail, no longer believed
            if rec.valid_to is not None and rec.valid_to <= now:
                retired += 1
                continue
            records.append(rec)
            counts[rec.kind] = counts.get(rec.kind, 0) + 1
        counts = {k: n for k, n in counts.items() if n}
        if counts:
            listed = ", ".join(_n(n, k) for k, n in sorted(counts.items()))
            if retired:
                listed += f" ({_n(retired, 'retired memory', 'retired memories')} not counted)"
            lines.append("- " + listed)
        facts = sorted((r for r in records if r.kind in ("fact", "entity")),
                       key=lambda r: r.created, reverse=True)
        if facts:
            lines.append("Recent facts:")
            for rec in facts[:SHOW]:
                text = " ".join(rec.content.split())
                text = text if len(text) <= FACT_CHARS else text[:FACT_CHARS - 1] + "…"
                lines.append(f"- {text} (from {rec.source}, trust {rec.trust:.2f})")
            if len(facts) > SHOW:
                lines.append(f"... and {len(facts) - SHOW} more")
        return lines

    def _where(self, gd: GroupDirectory) -> str:
        """A directory as a reply names it: its path under the data dir."""
        return gd.path.relative_to(self._files.data_dir).as_posix() + "/"

    def _records(self, gd: GroupDirectory) -> list[MemoryRecord]:
        out = []
        for path in gd.memory_files(d for d in MEMORY_DIRS if d != EPISODES_DIR):
            try:
                text = read_regular(path).decode("utf-8", errors="replace")
            except FileNotFoundError:
                continue
            out.append(parse_memory_file(text, fallback_id=id_from_filename(path.name),
                                         fallback_kind="note", mtime=now_utc()))
        return out

    # -- /forget ---------------------------------------------------------------------

    def forget_preview(self, group: str, phrase: str, dm_owner: str | None = None) -> str:
        """What ``/forget phrase confirm`` would remove, and how to confirm; in a DM
        (``dm_owner``) linked to a person, from their personal memory too."""
        try:
            phrase = validated_phrase(phrase)
        except ValueError as err:
            return f"/forget: {err}, e.g. /forget my old address"
        hits = [(key, gd, h) for key, gd in self._memories(group, dm_owner)
                for h in find_phrase(gd, phrase)]
        words = _unquoted(phrase)
        confirm = ("send the same /forget again with the word confirm at the end "
                   "(/forget <your words> confirm)")
        if not hits:
            return (f"Nothing in the memory of {group} holds {words}. To remove them from "
                    f"messages still waiting anyway, {confirm}.")
        total = sum(h.count for _, _, h in hits)
        personal = sum(1 for key, _, _ in hits if is_person_key(key))
        mine = f", {personal} of them in your personal memory" if personal else ""
        lines = [f"{words[:1].upper()}{words[1:]} appear {_n(total, 'time')} in "
                 f"{_n(len(hits), 'memory', 'memories')} of {group}{mine}; I would replace "
                 f"them with [redacted] (facts holding them are retired):"]
        # an id or a path can hold the words too (an entity file named after one); each
        # word is masked, shorter ones than a phrase may be ("my", "at") tell nothing
        pat = words_pattern([phrase, *(w for w in phrase.split()
                                       if len(w) >= PHRASE_MIN_CHARS)])
        assert pat is not None  # validated_phrase passed: never empty
        lines += [scrub_value(f"- {h.kind} {h.id} ("
                              f"{self._where(gd) + ': ' if is_person_key(key) else ''}{h.path}; "
                              f"from {h.source}, trust {h.trust:.2f})", pat, MASK)
                  for key, gd, h in hits[:SHOW]]
        if len(hits) > SHOW:
            lines.append(f"... and {len(hits) - SHOW} more")
        lines.append(f"To do it, {confirm}.")
        return "\n".join(lines)

    def forget(self, group: str, phrase: str, by: str, dm_owner: str | None = None) -> str:
        """Queue the redaction of ``phrase`` in ``group`` (a request and a job)."""
        try:
            phrase = validated_phrase(phrase)
        except ValueError as err:
            return f"/forget: {err}; nothing was removed."
        request = {"id": f"forget-{secrets.token_hex(8)}", "phrase": phrase, "by": by,
                   "at": time.time()}
        r = self._queue.connection
        # the redaction job reaches the persons in this set: the preview's fallback (the
        # owner's person, when a Redis wipe lost the set) must be in it too
        persons = [key for key, _ in self._memories(group, dm_owner) if is_person_key(key)]
        if persons:
            r.sadd(self._keys.person_memories(group), *persons)
        r.rpush(self._keys.forget(group), json.dumps(request, separators=(",", ":")))
        self.request_redaction(group)
        log.info("forget request %s for %s by %s queued", request["id"], group, by)
        return (f"Forgetting {_unquoted(phrase)} in {group}: they are replaced with "
                f"[redacted] in every memory file and in messages still waiting, in a "
                f"moment. The audit log records the change ({request['id']}), not the "
                f"words.")

    def request_redaction(self, group: str) -> str:
        """Enqueue the redaction job of ``group`` (it applies every waiting request)."""
        q = self._cfg.queue
        return enqueue_group_job(
            self._queue, REDACT_JOB, group,
            {"queue": q.name, "prefix": self._keys.prefix, "lock_ttl": q.lock_ttl,
             "job_timeout": self._cfg.worker.job_timeout, "retries": q.retries},
            timeout=self._cfg.worker.job_timeout, retries=q.retries)

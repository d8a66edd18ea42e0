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
from pathlib import Path

from rq import Queue

from gateway.config import GatewayConfig
from gateway.queue import REDACT_JOB, Keys, enqueue_group_job
from memory_store import GroupDirectory
from memory_store.atomic import read_regular
from memory_store.coresection import CoreSectionError, entries
from memory_store.fileformat import now_utc, parse
from memory_store.group import CORE_FILE, PROFILE_FILE
from memory_store.paths import KIND_DIRS, MEMORY_DIRS, id_from_filename
from memory_store.protocol import MemoryRecord
from memory_store.redact import check_phrase, find_phrase

log = logging.getLogger(__name__)

#: lines a preview or a listing shows before "... and N more"
SHOW = 8
EPISODES_DIR = KIND_DIRS["episode"]
#: characters of a fact shown by ``/memory``
FACT_CHARS = 120


class MemoryDesk:
    """``/memory`` and ``/forget`` for the groups of one gateway."""

    def __init__(self, config: GatewayConfig, queue: Queue, keys: Keys) -> None:
        self._cfg = config
        self._queue = queue
        self._keys = keys

    def _dir(self, group: str) -> GroupDirectory | None:
        gd = GroupDirectory(Path(self._cfg.data_dir), group)
        return gd if gd.path.is_dir() else None

    # -- /memory ---------------------------------------------------------------------

    def view(self, group: str) -> str:
        """A short listing of what the bot keeps about ``group``, with sources."""
        gd = self._dir(group)
        if gd is None:
            return f"I keep nothing about {group} yet."
        lines = [f"What I keep about {group}:"]
        core = []
        for name in (CORE_FILE, PROFILE_FILE):
            try:
                size = len(read_regular(gd.path / name))
            except FileNotFoundError:
                continue
            try:
                kept = len(entries(gd, name))
            except CoreSectionError:
                kept = 0
            core.append(f"{name} {size} bytes ({kept} entries I added)")
        if core:
            lines.append("- core memory: " + ", ".join(core))
        # Episodes are the bulk (a busy group has tens of thousands): counted from the
        # listing, never parsed; the rest is read for its facts.
        counts = {"episode": sum(1 for _ in gd.memory_files([EPISODES_DIR]))}
        records = self._records(gd)
        for rec in records:
            counts[rec.kind] = counts.get(rec.kind, 0) + 1
        counts = {k: n for k, n in counts.items() if n}
        if counts:
            lines.append("- " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        now = now_utc()
        facts = sorted((r for r in records if r.kind in ("fact", "entity")
                        and (r.valid_to is None or r.valid_to > now)),
                       key=lambda r: r.created, reverse=True)
        if facts:
            lines.append("Recent facts:")
            for rec in facts[:SHOW]:
                text = " ".join(rec.content.split())
                text = text if len(text) <= FACT_CHARS else text[:FACT_CHARS - 1] + "…"
                lines.append(f"- {text} (from {rec.source}, trust {rec.trust:.2f})")
            if len(facts) > SHOW:
                lines.append(f"... and {len(facts) - SHOW} more")
        lines.append("/forget <words> removes words from all of it.")
        return "\n".join(lines)

    def _records(self, gd: GroupDirectory) -> list[MemoryRecord]:
        out = []
        for path in gd.memory_files(d for d in MEMORY_DIRS if d != EPISODES_DIR):
            try:
                text = read_regular(path).decode("utf-8", errors="replace")
            except FileNotFoundError:
                continue
            out.append(parse(text, fallback_id=id_from_filename(path.name),
                             fallback_kind="note", mtime=now_utc()))
        return out

    # -- /forget ---------------------------------------------------------------------

    def forget_preview(self, group: str, phrase: str) -> str:
        """What ``/forget phrase confirm`` would remove, and how to confirm."""
        try:
            phrase = check_phrase(phrase)
        except ValueError as err:
            return f"/forget: {err}, e.g. /forget my old address"
        gd = self._dir(group)
        hits = find_phrase(gd, phrase) if gd is not None else []
        confirm = f"send /forget {phrase} confirm"
        if not hits:
            return (f'Nothing in the memory of {group} holds "{phrase}". To remove it from '
                    f"messages still waiting anyway, {confirm}.")
        total = sum(h.count for h in hits)
        lines = [f'"{phrase}" appears {total} times in {len(hits)} memories of {group}; '
                 f"I would replace it with [redacted] (facts holding it are retired):"]
        lines += [f"- {h.kind} {h.id} ({h.path}; from {h.source}, trust {h.trust:.2f})"
                  for h in hits[:SHOW]]
        if len(hits) > SHOW:
            lines.append(f"... and {len(hits) - SHOW} more")
        lines.append(f"To do it, {confirm}.")
        return "\n".join(lines)

    def forget(self, group: str, phrase: str, by: str) -> str:
        """Queue the redaction of ``phrase`` in ``group`` (a request and a job)."""
        try:
            phrase = check_phrase(phrase)
        except ValueError as err:
            return f"/forget: {err}; nothing was removed."
        request = {"id": f"forget-{secrets.token_hex(8)}", "phrase": phrase, "by": by,
                   "at": time.time()}
        r = self._queue.connection
        r.rpush(self._keys.forget(group), json.dumps(request, separators=(",", ":")))
        self.request_redaction(group)
        log.info("forget request %s for %s by %s queued", request["id"], group, by)
        return (f'Forgetting "{phrase}" in {group}: it is replaced with [redacted] in '
                f"every memory file and in messages still waiting, in a moment. The "
                f"audit log records the change ({request['id']}), not the words.")

    def request_redaction(self, group: str) -> str:
        """Enqueue the redaction job of ``group`` (it applies every waiting request)."""
        q = self._cfg.queue
        return enqueue_group_job(
            self._queue, REDACT_JOB, group,
            {"queue": q.name, "prefix": self._keys.prefix, "lock_ttl": q.lock_ttl,
             "job_timeout": self._cfg.job_timeout, "retries": q.retries},
            timeout=self._cfg.job_timeout, retries=q.retries)

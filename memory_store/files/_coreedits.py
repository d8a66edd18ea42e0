"""Operator edits of core memory, told apart from the project's own writes by the audit
log (not by modification times, which an editor, a copy or a clock can move any way).

Every write this package makes to ``CLAUDE.md`` or ``user_profile.md`` is audited with
the file's new hash (``coresection``, ``redact``, the template ``GroupDirectory.ensure``
writes). A core file whose bytes do not hash to the last audited ``new_hash`` of its path
was therefore changed by someone else: the operator, by hand. :func:`notice_core_edits` records such
an edit (actor ``operator``, op ``operator_edit``, with the file's mtime as ``edited_at``,
shown, never compared) and returns the operator edits since the group's last turn (its
newest episode write), so the next turn is told of them, and a retried turn as well: a
turn that completes is the acknowledgement.

A core file no audit entry names (a group from before this existed) is taken as it is
(``baseline``), so an upgrade does not report every group's file as edited.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime

from memory_store.files._atomic import read_regular
from memory_store.files._audit import AuditLog
from memory_store.files._fileformat import content_hash
from memory_store.files._group import CORE_FILES, GroupDirectory

OPERATOR_ACTOR = "operator"
OPERATOR_EDIT_OP = "operator_edit"
BASELINE_OP = "baseline"
_EPISODES = "episodes/"


@dataclass(frozen=True)
class CoreEdit:
    """One operator edit of a core file: which, and when (the file's mtime then)."""

    path: str
    edited_at: datetime | None


def _current(gd: GroupDirectory, name: str) -> tuple[str | None, float | None]:
    try:
        data = read_regular(gd.path / name)
        mtime = os.stat(gd.path / name).st_mtime
    except FileNotFoundError:
        return None, None
    return content_hash(data), mtime


def record_edits(gd: GroupDirectory, audit: AuditLog | None = None) -> None:
    """Audit any core file that changed since its last audited write as the operator's
    edit. Called before every audited core write (so a hand edit made just before is
    not hidden by it) and by :func:`notice_core_edits`. The caller may hold the group lock."""
    audit = audit or AuditLog(gd.path)
    with gd.lock():
        now = {name: _current(gd, name) for name in CORE_FILES}
        # a core file is written rarely and its last audited write may lie far back in
        # a long log: while the files hash as last audited, the log is not read back
        if gd.core_audited == {n: d for n, (d, _) in now.items()}:
            return
        last: dict[str, str | None] = {}
        for entry in audit.newest_first():
            path = entry.get("path")
            # a write says the file's new hash (a summary entry, like redact's, has none)
            if path in CORE_FILES and path not in last and entry.get("new_hash"):
                last[path] = entry["new_hash"]
                if len(last) == len(CORE_FILES):
                    break
        for name in CORE_FILES:
            digest, mtime = now[name]
            if name not in last:
                if digest is not None:
                    audit.append(actor="memory_store", op=BASELINE_OP, memory_id=name,
                                 path=name, old_hash=None, new_hash=digest)
                continue
            if digest == last[name]:
                continue
            edited = None if mtime is None else datetime.fromtimestamp(mtime, UTC)
            audit.append(actor=OPERATOR_ACTOR, op=OPERATOR_EDIT_OP, memory_id=name, path=name,
                         old_hash=last[name], new_hash=digest,
                         edited_at=None if edited is None else edited.isoformat())
        gd.core_audited = {n: d for n, (d, _) in now.items()}


def notice_core_edits(gd: GroupDirectory) -> list[CoreEdit]:
    """Record new operator edits, then return those since the group's last turn (oldest
    first)."""
    audit = AuditLog(gd.path)
    record_edits(gd, audit)
    found: list[CoreEdit] = []
    for entry in audit.newest_first():
        if entry.get("op") == "write" and str(entry.get("path", "")).startswith(_EPISODES):
            break
        if entry.get("op") == OPERATOR_EDIT_OP and entry.get("actor") == OPERATOR_ACTOR:
            at = entry.get("edited_at")
            found.append(CoreEdit(str(entry.get("path")),
                                  datetime.fromisoformat(at) if isinstance(at, str) else None))
    return found[::-1]

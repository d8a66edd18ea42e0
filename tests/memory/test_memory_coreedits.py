"""Operator edits of core files (memory_store/files/_coreedits.py), told apart by the audit
log: never by modification times, and not hidden by the package's next own write."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

from memory_store import GroupDirectory, open_memory
from memory_store.files import OPERATOR_EDIT_OP, AuditLog, add_agent_entry, notice_core_edits
from memory_store.maintenance import redact_phrase

GROUP = "test:g1"


def _edits(gd: GroupDirectory) -> list[str]:
    return [e["path"] for e in AuditLog(gd.path).entries() if e["op"] == OPERATOR_EDIT_OP]


def test_the_packages_own_writes_are_not_edits_whatever_the_mtime(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, GROUP).ensure()
    os.utime(gd.core_path, (1, 1))  # a template from 1970: still the package's own
    assert notice_core_edits(gd) == []
    add_agent_entry(gd, "CLAUDE.md", "Answer briefly", source="test:g1:msg/1", trust=0.9,
                    actor="agent", today=date(2026, 12, 3))
    assert notice_core_edits(gd) == [] and _edits(gd) == []


def test_a_hand_edit_is_recorded_before_the_next_own_write(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, GROUP).ensure()
    gd.profile_path.write_text(gd.profile_path.read_text() + "\nAnn is the admin.\n")
    add_agent_entry(gd, "user_profile.md", "Ann likes tea", source="test:g1:msg/2", trust=0.9,
                    actor="agent", today=date(2026, 12, 3))
    assert _edits(gd) == ["user_profile.md"]
    [edit] = notice_core_edits(gd)
    assert edit.path == "user_profile.md" and edit.edited_at is not None

    mem = open_memory(tmp_path, GROUP, "file", watch="poll")
    try:
        gd.core_path.write_text(gd.core_path.read_text() + "\nThe code word is Pelican.\n")
        redact_phrase(mem, "Pelican", request="forget-1")  # rewrites CLAUDE.md itself
    finally:
        mem.close()
    assert _edits(gd) == ["user_profile.md", "CLAUDE.md"]
    assert [e.path for e in notice_core_edits(gd)] == ["user_profile.md", "CLAUDE.md"]

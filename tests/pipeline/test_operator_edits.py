"""An operator's hand edit of CLAUDE.md is noted to the next turn, once; the project's own
writes are not, whatever the files' modification times say (memory_store/files/_coreedits.py)."""

from __future__ import annotations

import os
from datetime import date

from memory_store import GroupDirectory
from memory_store.files import OPERATOR_ACTOR, OPERATOR_EDIT_OP, AuditLog, add_agent_entry
from tests.pipeline.conftest import Stack

GROUP = "local:ann"
EDITED = "core memory (CLAUDE.md) was edited by the operator at"


def _edit_notes(stack: Stack) -> list[bool]:
    return [any(EDITED in n for n in t["notes"]) for t in stack.turns()]


async def test_an_operator_edit_is_noted_to_the_next_turn_only(stack: Stack) -> None:
    stack.start_workers(1)
    await stack.start_gateway()
    assert (await stack.ask("ann", "ann", "hi", message_id="m1")).reply is not None
    await stack.settled(GROUP)
    gd = GroupDirectory(stack.data_dir, GROUP)

    # the operator edits by hand, and even puts the old mtime back: still noticed
    st = os.stat(gd.core_path)
    gd.core_path.write_text(gd.core_path.read_text() + "\nAlways answer in French.\n")
    os.utime(gd.core_path, ns=(st.st_atime_ns, st.st_mtime_ns))
    await stack.ask("ann", "ann", "hello again", message_id="m2")
    await stack.settled(GROUP)
    await stack.ask("ann", "ann", "and again", message_id="m3")
    await stack.settled(GROUP)

    # the project's own write (the agent's core-memory tool goes through add_entry),
    # with a fresh mtime as any write has: not an operator edit
    add_agent_entry(gd, "CLAUDE.md", "Ann prefers short answers", source="local:ann:msg/m3",
                    trust=0.9, actor="agent", today=date(2026, 12, 3))
    os.utime(gd.core_path)
    await stack.ask("ann", "ann", "one more", message_id="m4")
    await stack.settled(GROUP)

    assert _edit_notes(stack) == [False, True, False, False]
    [edit] = [e for e in AuditLog(gd.path).entries() if e["op"] == OPERATOR_EDIT_OP]
    assert edit["actor"] == OPERATOR_ACTOR and edit["path"] == "CLAUDE.md"

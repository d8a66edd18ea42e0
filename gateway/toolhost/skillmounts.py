"""A group's skills as read-only mounts of its sandbox.

Every skill the group has (the global ones and its own, its own winning on a name:
``memory_store.files._skills``) appears at ``/skills/<name>`` inside the sandbox, bound
read-only, so ``run_command`` can run a skill's scripts and nothing in the sandbox can
change them; the ``skills/`` folders themselves, and the rest of the data dir, stay out
of view. Read for each call, so a skill the operator just dropped in is there.
"""

from __future__ import annotations

from pathlib import Path

from gateway.intake._groupfiles import GroupFiles
from gateway.toolhost.workspace import Mount
from memory_store.files import MAX_SKILLS, SKILLS_SANDBOX_MOUNT


def skill_mounts(data_dir: Path, group: str) -> tuple[Mount, ...]:
    """The read-only mounts of ``group``'s skills (as many as the prompt lists)."""
    skills = GroupFiles(data_dir).skills(group)[:MAX_SKILLS]
    return tuple(Mount(s.folder, f"{SKILLS_SANDBOX_MOUNT}/{s.name}") for s in skills)

"""The gateway's one way to the group directories under the data dir.

Every gateway-side module that touches a group's files asks ``GroupFiles``: ``/memory``
and ``/forget`` (``gateway.intake._memorydesk``), the ``pynanoclaw memory`` commands, scheduled
tasks (``gateway.tasks``), the operator's file drop (``gateway.intake._filedrop``) and the
sandbox's workspace (``gateway.toolhost``) and received files (``gateway.media``). None
builds a group path itself (``tests/structure/test_groupfiles.py`` checks the source),
so a console or a sharded layout change this module only. Memory is written by workers
alone, under the group lock: ``existing`` and ``memories`` only read, and never create
a directory. The gateway side writes three things of its own: a chat's scheduled tasks (``tasks``,
atomically and audited, under the group's file lock), the sandbox's ``workspace/`` and
received files (``attachments``, under that folder's own lock).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gateway.config import Settings
from gateway.queue.events import FILES_FOLDER
from memory_store import GroupDirectory, InvalidGroupKey, is_person_key, person_key
from memory_store.files import ATTACHMENTS_FOLDER as ATTACHMENTS
from memory_store.files import Skill, groups_root, key_of_dir, skills_for
from memory_store.tasks import TaskStore, groups_with_tasks

#: a group's sandbox workspace folder (gateway.toolhost)
WORKSPACE = "workspace"


class GroupFiles:
    """The group directories of one data dir, and the backend (with its options: the
    ranking weights) the workers index and search them with."""

    def __init__(self, data_dir: Path, backend: str = "file",
                 options: dict[str, Any] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.backend = backend
        self.options = dict(options or {})

    @classmethod
    def of(cls, config: Settings) -> GroupFiles:
        """The directories ``config`` names (``data_dir``, ``[memory]``)."""
        return cls(config.data_dir, config.memory.backend, config.memory.backend_options())

    def existing(self, group: str) -> GroupDirectory | None:
        """The directory of ``group`` (``<channel>:<chat>``), or ``None`` when the bot
        has never kept anything about it. Raises ``InvalidGroupKey`` for a key that
        would leave the data dir."""
        gd = GroupDirectory(self.data_dir, group)
        return gd if gd.path.is_dir() else None

    def memories(self, group: str, persons: Iterable[str] = (), linked: str | None = None
                 ) -> list[tuple[str, GroupDirectory]]:
        """(key, directory) of every existing directory holding chat ``group``'s memory:
        its own, then the linked persons' its DM's turns write to
        (``workers.identity.memory_key``): ``persons`` as keys (``person:<id>``),
        ``linked`` as a person id. The caller decides which persons: never a group
        chat's. Never creates a directory; a person key that is not one, or would leave
        the data dir, is skipped (it came from Redis, not from the operator)."""
        found: list[tuple[str, GroupDirectory]] = []
        own = self.existing(group)
        if own is not None:
            found.append((group, own))
        wanted = set(persons)
        if linked:  # an unsafe id is refused by ``existing`` below
            wanted.add(person_key(linked))
        for key in sorted(wanted):
            if not is_person_key(key):
                continue
            try:
                gd = self.existing(key)
            except InvalidGroupKey:
                continue
            if gd is not None:
                found.append((key, gd))
        return found

    def tasks(self, group: str) -> TaskStore:
        """The scheduled tasks of ``group`` (``tasks/`` in its directory)."""
        return TaskStore(GroupDirectory(self.data_dir, group))

    def groups_with_tasks(self) -> list[GroupDirectory]:
        """Every group directory that holds a task file."""
        return list(groups_with_tasks(self.data_dir))

    def workspace(self, group: str) -> Path:
        """The path of ``group``'s ``workspace/``, the only writable mount of its sandbox
        (``gateway.toolhost``, which creates it); not created here."""
        return GroupDirectory(self.data_dir, group).path / WORKSPACE

    def skills(self, group: str) -> list[Skill]:
        """``group``'s skills (the global ones and its own, its own winning on a name),
        read now; only read (``memory_store.files._skills``)."""
        return skills_for(self.data_dir, group)

    def outbox_file(self, group: str, sha256: str) -> Path:
        """Where a file the worker stored for ``group``'s chat waits for the outbox
        (``events.FILES_FOLDER``), named by its content hash (64 hex digits, checked)."""
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ValueError("a file is named by its sha256, 64 lowercase hex digits")
        return GroupDirectory(self.data_dir, group).path / FILES_FOLDER / sha256

    def attachments(self, group: str) -> Path:
        """The path of ``group``'s ``attachments/``: received files by content hash
        (``gateway.media.store`` writes them); not created here."""
        return GroupDirectory(self.data_dir, group).path / ATTACHMENTS

    def chats_with(self, folder: str) -> list[tuple[str, Path]]:
        """(group key, ``folder``) of every chat directory that has that folder (e.g. the
        ``inbox/`` the operator drops files into); never creates anything."""
        out: list[tuple[str, Path]] = []
        for channel in _subdirs(groups_root(self.data_dir)):
            for chat in _subdirs(channel):
                inside = chat / folder
                if inside.is_dir() and (group := key_of_dir(self.data_dir, chat)) is not None:
                    out.append((group, inside))
        return out


def _subdirs(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []

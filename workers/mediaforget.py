"""A deleted message's files, and files a ``/forget`` names, leave the chat's
``attachments/`` (``memory_store.files._attachments``), as part of the redaction job.

A deletion drops its message from the files' sidecars; a file no message refers to any
more is deleted. A ``/forget`` phrase deletes the files referenced (``[file <hash>]``)
on the episode lines that hold it, and those whose original name holds it. Run before
memory is rewritten (the episode lines still hold the words then); running it again
finds nothing more to delete.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from pathlib import Path

from memory_store import BaseMemory, GroupDirectory
from memory_store.files import attachments as files
from memory_store.maintenance import words_pattern

#: how ``workers.turn.episode_text`` names a message's stored file
FILE_REF = re.compile(r"\[file ([0-9a-f]{64}\.[a-z0-9]{1,5})\]")


def forget_files(data_dir: Path, group: str, memories: Sequence[BaseMemory],
                 deleted: Collection[str], phrases: Collection[str]) -> list[str]:
    """Remove the files of the ``deleted`` message ids and those ``phrases`` name."""
    gd = GroupDirectory(data_dir, group)
    removed = files.forget_messages(gd, deleted) if deleted else []
    if (pat := words_pattern(phrases)) is not None:  # found anywhere, in any case
        named = {ref for memory in memories
                 for rec in memory.records({"kind": "episode"})
                 for line in rec.content.splitlines() if pat.search(line)
                 for ref in FILE_REF.findall(line)}
        removed += files.forget_stored(gd, named, pat)
    return removed

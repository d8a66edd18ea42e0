"""Group key -> group directory, safely.

A group key (``<channel>:<chat_id>``) becomes ``<data>/groups/<channel>/<chat>``; a
person's key (``person:<id>``, :func:`person_key`: the personal memory all of one
person's linked DMs share) becomes ``<data>/persons/<id>``. Each
component is sanitized to ``[A-Za-z0-9._-]`` with anything else percent-style escaped,
so distinct keys stay distinct, ``..``/NUL/slashes cannot appear, and the resolved path
is checked to lie under the data dir.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from memory_store._errors import InvalidGroupKey

GLOBAL_GROUP = "global"
#: the "channel" of a person's memory key; no chat platform is called that
PERSON_CHANNEL = "person"
_SAFE = re.compile(r"[A-Za-z0-9_-]")
_ESCAPED = re.compile(r"~([0-9a-f]+)~")
_MAX_COMPONENT = 120


def _escaped(raw: str, keep: str, limit: int, cut: int) -> str:
    """``raw`` with each character but ``[A-Za-z0-9_-]`` and ``keep`` written ``~<hex>~``
    (injective); longer than ``limit``: its first ``cut`` characters and a digest."""
    out = "".join(ch if _SAFE.fullmatch(ch) or ch in keep else f"~{ord(ch):x}~" for ch in raw)
    if len(out) > limit:
        import hashlib

        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out = f"{out[:cut]}_{digest}"
    return out


def _unescaped(name: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), name)


def _component(raw: str) -> str:
    if not raw:
        raise InvalidGroupKey("empty group key component")
    return _escaped(raw, "", _MAX_COMPONENT, _MAX_COMPONENT - 17)


def groups_root(data_dir: Path) -> Path:
    return Path(data_dir).resolve() / "groups"


def persons_root(data_dir: Path) -> Path:
    return Path(data_dir).resolve() / "persons"


def person_key(person_id: str) -> str:
    """The memory key of a person's own directory (``<data>/persons/<id>/``)."""
    if not person_id:
        raise InvalidGroupKey("empty person id")
    return f"{PERSON_CHANNEL}:{person_id}"


def is_person_key(key: str) -> bool:
    return key.partition(":")[0] == PERSON_CHANNEL


def group_dir(data_dir: Path, group: str) -> Path:
    """The directory of ``group`` (``<channel>:<chat_id>``) under ``data_dir``.

    Raises ``InvalidGroupKey`` for a key that has no channel or chat part, or names
    the operator's global directory.
    """
    channel, sep, chat = group.partition(":")
    if not sep or not channel or not chat:
        raise InvalidGroupKey(f"group key must be '<channel>:<chat>', got {group!r}")
    if channel == PERSON_CHANNEL:
        people = persons_root(data_dir)
        path = (people / _component(chat)).resolve()
        if path.parent != people:
            raise InvalidGroupKey(f"person key {group!r} escapes the data dir")
        return path
    root = groups_root(data_dir)
    path = (root / _component(channel) / _component(chat)).resolve()
    if root not in path.parents or path.parent.parent != root:
        raise InvalidGroupKey(f"group key {group!r} escapes the data dir")
    if path.parent.name == GLOBAL_GROUP and path.parent.parent == root:
        raise InvalidGroupKey("'global' is the operator's directory, not a channel")
    return path


def key_of_dir(data_dir: Path, path: Path) -> str | None:
    """The group key whose :func:`group_dir` is ``path`` (a chat's, under ``groups/``);
    None for anything else, and for a component shortened with a digest (its key
    cannot be recovered from the name)."""
    root = groups_root(data_dir)
    path = Path(path).resolve()
    if path.parent.parent != root or path.parent.name == GLOBAL_GROUP:
        return None
    parts = []
    for name in (path.parent.name, path.name):
        if not re.fullmatch(r"(?:[A-Za-z0-9_-]|~[0-9a-f]+~)+", name):
            return None
        parts.append(_unescaped(name))
    key = f"{parts[0]}:{parts[1]}"
    return key if group_dir(data_dir, key) == path else None


def global_dir(data_dir: Path) -> Path:
    """The operator's read-only global memory directory."""
    return groups_root(data_dir) / GLOBAL_GROUP


def global_skills_dir(data_dir: Path) -> Path:
    """The operator's global skills (``<data>/skills/``; a group's own are in its
    directory's ``skills/``: ``memory_store.files._skills``)."""
    return Path(data_dir).resolve() / "skills"


# --- memory ids and files inside one group directory -------------------------------

#: Memory kind -> sub-directory. Kinds not listed here live in ``notes/``.
KIND_DIRS: dict[str, str] = {
    "episode": "episodes",
    "entity": "entities",
    "fact": "entities",
    "procedure": "procedures",
    "reflection": "reflections",
}
DEFAULT_KIND_DIR = "notes"
#: Every directory that holds memory files, in scan order.
MEMORY_DIRS: tuple[str, ...] = ("episodes", "entities", "procedures", "reflections", "notes")
#: Directories whose new files go to one sub-folder per month (:func:`shard_name`).
#: Every memory directory may hold one level of sub-folders (hand-made too); deeper
#: files are ignored.
SHARDED_DIRS: frozenset[str] = frozenset({"episodes"})

_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_MAX_ID = 200


def validate_kind(kind: str) -> str:
    """Return ``kind`` if it is a short lowercase word; raise ``ValueError`` otherwise."""
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise ValueError(f"memory kind must match [a-z][a-z0-9_-]*, got {kind!r}")
    return kind


def validate_memory_id(memory_id: str) -> str:
    """Return ``memory_id`` if it is a safe id; raise ``InvalidMemoryId`` otherwise.

    Ids may carry most printable characters (``telegram:-100:42``, ``chat:turn/7`` are
    fine) but never a backslash, a NUL or control character, a leading dot, or an
    empty/``.``/``..`` segment between slashes. The file name escapes every character
    outside ``[A-Za-z0-9._-]`` anyway, so no id can name a file outside its group.
    """
    from memory_store._errors import InvalidMemoryId

    if not isinstance(memory_id, str) or not memory_id:
        raise InvalidMemoryId("memory id must be a non-empty string")
    if len(memory_id) > _MAX_ID:
        raise InvalidMemoryId(f"memory id longer than {_MAX_ID} characters")
    if memory_id in {".", ".."} or memory_id.startswith("."):
        raise InvalidMemoryId(f"memory id {memory_id!r} may not start with '.'")
    bad = [ch for ch in memory_id if ch == "\\" or ord(ch) < 32 or ord(ch) == 127]
    if bad or memory_id != memory_id.strip():
        raise InvalidMemoryId(f"memory id {memory_id!r} contains a forbidden character")
    # "/" is allowed (turn ids like "chat:msg/7") because the file name escapes it, but
    # anything that reads like a path walk is refused outright.
    if any(seg in {"", ".", ".."} for seg in memory_id.split("/")):
        raise InvalidMemoryId(f"memory id {memory_id!r} looks like a path")
    return memory_id


def memory_filename(memory_id: str) -> str:
    """The file name (``<escaped id>.md``) that stores ``memory_id``; injective."""
    validate_memory_id(memory_id)
    return f"{_escaped(memory_id, '.', 200, 150)}.md"  # file systems cap names at 255 bytes


def id_from_filename(name: str) -> str:
    """Inverse of :func:`memory_filename` (used for hand-made files without an id)."""
    return _unescaped(name.removesuffix(".md"))


def shard_name(created: datetime) -> str:
    """The sub-folder of ``episodes/`` for a memory created at ``created``: its month.

    A busy group writes tens of thousands of episodes a year; one folder per month keeps
    every folder to a few thousand files and lets change detection look only at the
    folders that changed.
    """
    return created.astimezone(UTC).strftime("%Y-%m")


def memory_path(group_path: Path, kind: str, memory_id: str,
                created: datetime | None = None) -> Path:
    """Where a memory of ``kind`` with ``memory_id`` lives inside ``group_path``.

    Episodes go to ``episodes/<YYYY-MM>/`` by ``created`` (default: now). Checked to
    resolve inside the group directory (defence in depth on top of the id validation).
    """
    root = Path(group_path).resolve()
    sub = KIND_DIRS.get(validate_kind(kind), DEFAULT_KIND_DIR)
    if sub in SHARDED_DIRS:
        sub = f"{sub}/{shard_name(created or datetime.now(UTC))}"
    path = (root / sub / memory_filename(memory_id)).resolve()
    if path.parent != root / sub:
        from memory_store._errors import InvalidMemoryId

        raise InvalidMemoryId(f"memory id {memory_id!r} escapes the group directory")
    return path

"""Skills: folders of operator-written instructions (``SKILL.md``) and reference files.

A skill is ``<root>/<name>/SKILL.md``: a YAML front matter with ``name`` (the folder's
name), ``description`` and optionally ``when_to_use``, then the instructions; files
beside it are the skill's references and scripts. The roots are the operator's global
``<data>/skills/`` and a group's ``<group dir>/skills/``; on the same name the group's
wins. Only the operator writes them: no tool writes there, and a sandbox sees a skill
only as a read-only mount (``gateway.toolhost.skillmounts``).

Skills are read at turn time, so a folder dropped in is seen by the next turn: listing
costs one ``scandir`` per root and one ``stat`` per skill, and a ``SKILL.md`` is parsed
again only when its (mtime, size) changed. A bad one is skipped and logged once per
version, naming the file and the fix.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from memory_store.files._paths import global_skills_dir, group_dir

log = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
#: where a group's skills appear inside its sandbox, read-only: ``/skills/<name>``
SKILLS_SANDBOX_MOUNT = "/skills"
#: a skill's name: its folder's, also safe as a mount point (``/skills/<name>``)
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: at most this many skills are listed in a prompt (by name; the rest are logged)
MAX_SKILLS = 30
#: a description (and a "when to use") is cut to this many characters in the prompt
SKILL_DESCRIPTION_MAX_CHARS = 300
#: the largest ``SKILL.md`` read at all (a front matter and instructions, not a corpus)
SKILL_MD_MAX_BYTES = 256_000
#: bytes of one file ``read_skill`` returns; past it the text says it was cut
SKILL_READ_MAX_BYTES = 48_000


class SkillError(ValueError):
    """A ``SKILL.md`` that cannot be used, or a file a skill may not name; the message
    says which and why."""


@dataclass(frozen=True)
class Skill:
    """One usable skill: what the prompt lists, and its (resolved) folder."""

    name: str
    description: str
    when_to_use: str
    folder: Path
    #: "global" (``<data>/skills``) or "group" (the group's own ``skills/``)
    scope: str


def _one_line(value: object, key: str, path: Path) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SkillError(f"{path}: '{key}' must be text, not {type(value).__name__}")
    return " ".join(value.split())


def parse_skill(folder: Path, text: str, scope: str) -> Skill:
    """The skill in ``folder`` from its ``SKILL.md`` text. Raises ``SkillError``."""
    path = folder / SKILL_FILE
    lines = text.removeprefix("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---" or "---" not in (x.strip() for x in lines[1:]):
        raise SkillError(f"{path}: no front matter; start the file with a '---' line, then "
                         "'name:' and 'description:', then a closing '---'")
    end = 1 + [x.strip() for x in lines[1:]].index("---")
    try:
        head = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as err:
        raise SkillError(f"{path}: the front matter is not valid YAML ({err})") from None
    if not isinstance(head, dict):
        raise SkillError(f"{path}: the front matter must be 'key: value' lines")
    name = _one_line(head.get("name"), "name", path)
    if name != folder.name:
        raise SkillError(f"{path}: 'name' is {name!r}; it must be the folder's name "
                         f"{folder.name!r}")
    description = _one_line(head.get("description"), "description", path)
    if not description:
        raise SkillError(f"{path}: 'description' is missing; say what the skill does")
    when = _one_line(head.get("when_to_use"), "when_to_use", path)
    return Skill(name, description, when, folder, scope)


_cache: dict[Path, tuple[tuple[int, int], Skill | None]] = {}
_cache_lock = threading.Lock()


def _load(folder: Path, scope: str) -> Skill | None:
    """The skill in ``folder`` (None: not one, or a bad one, logged once per version)."""
    path = folder / SKILL_FILE
    try:
        st = path.stat()
    except OSError:
        return None  # a folder without SKILL.md is not a skill (yet)
    version = (st.st_mtime_ns, st.st_size)
    with _cache_lock:
        cached = _cache.get(path)
    if cached is not None and cached[0] == version:
        return cached[1]
    skill: Skill | None = None
    try:
        if st.st_size > SKILL_MD_MAX_BYTES:
            raise SkillError(f"{path}: over {SKILL_MD_MAX_BYTES} bytes; move reference "
                             "text into files beside it")
        skill = parse_skill(folder, path.read_text(encoding="utf-8"), scope)
    except (SkillError, OSError, UnicodeDecodeError) as err:
        log.warning("skill skipped: %s", err)
    with _cache_lock:
        _cache[path] = (version, skill)
    return skill


def skills_for(data_dir: Path, group: str) -> list[Skill]:
    """``group``'s skills: the global ones (``<data>/skills``) and its own (its own win on
    a name), sorted by name. Never raises: a missing root has none, a bad skill is
    skipped."""
    found: dict[str, Skill] = {}
    for scope, root in (("global", global_skills_dir(data_dir)),
                        ("group", group_dir(data_dir, group) / "skills")):
        try:
            with os.scandir(root) as entries:
                names = sorted(e.name for e in entries if e.is_dir())
        except OSError:
            continue
        for name in names:
            if name.startswith("."):
                continue
            folder = (root / name).resolve()
            if not NAME.fullmatch(name):
                if _first(root / name):
                    log.warning("skill skipped: %s: a skill folder's name must match %s",
                                root / name, NAME.pattern)
                continue
            skill = _load(folder, scope)
            if skill is not None:
                found[name] = skill
    return [found[n] for n in sorted(found)]


_named: set[Path] = set()


def _first(path: Path) -> bool:
    """True the first time ``path`` is reported (a bad folder name is logged once)."""
    with _cache_lock:
        seen = path in _named
        _named.add(path)
    return not seen


def skill_file(skill: Skill, file: str | None = None) -> Path:
    """The path of ``file`` (default ``SKILL.md``) inside ``skill``'s folder, resolved.
    Raises ``SkillError`` for an absolute path, a ``..`` step, or a name that resolves
    (symlinks followed) outside the folder."""
    rel = (file or SKILL_FILE).strip()
    if not rel or "\0" in rel or rel.startswith(("/", "\\")) or \
            any(part == ".." for part in re.split(r"[/\\]", rel)):
        raise SkillError(f"{file!r}: name a file inside the skill, e.g. 'reference.md'")
    folder = skill.folder.resolve()
    path = (folder / rel).resolve()
    if not path.is_relative_to(folder) or path == folder:
        raise SkillError(f"{file!r} is outside the skill {skill.name!r}")
    return path


def read_skill_file(skill: Skill, file: str | None = None) -> tuple[str, bool]:
    """(text, cut) of ``file`` in ``skill`` (default: ``SKILL.md``'s instructions, its
    front matter left out); at most ``SKILL_READ_MAX_BYTES``. Raises ``SkillError``."""
    path = skill_file(skill, file)
    if not path.is_file():
        raise SkillError(f"the skill {skill.name!r} has no file {file!r}"
                         f"; its files: {', '.join(skill_files(skill)) or 'none'}")
    with path.open("rb") as fh:
        data = fh.read(SKILL_READ_MAX_BYTES + 1)
    if b"\0" in data[:4096]:
        raise SkillError(f"{file!r} is a binary file; run it in the sandbox instead")
    text = data[:SKILL_READ_MAX_BYTES].decode("utf-8", errors="replace")
    if path.name == SKILL_FILE and path.parent == skill.folder.resolve():
        lines = text.splitlines(keepends=True)
        ends = [i for i, x in enumerate(lines[1:], 1) if x.strip() == "---"]
        text = "".join(lines[ends[0] + 1:]) if ends else text
    return text.strip("\n"), len(data) > SKILL_READ_MAX_BYTES


def skill_files(skill: Skill, limit: int = 50) -> list[str]:
    """The skill's files (relative paths, hidden ones left out), at most ``limit``."""
    folder = skill.folder.resolve()
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                out.append(str((Path(dirpath) / name).relative_to(folder)))
                if len(out) >= limit:
                    return out
    return out

"""The agent-maintained section of a core memory file (``CLAUDE.md``, ``user_profile.md``).

Core files are the operator's: they write them by hand. The assistant may keep a short
list of entries between two marker lines; everything outside the markers stays byte for
byte as the operator left it. The section is bounded (core memory is in every prompt):
adding past the bound drops the oldest entries, each drop audited. Entries are one line
each, ``- text (source: ...; trust 0.80; 2026-11-29)``, deduplicated by their text, so a
retried turn adds nothing twice. Who may add what is not decided here (that is policy,
``workers.core_rules``); this module only keeps the file well-formed, crash-safe (atomic
rename under the group lock) and audited.

```
# Group memory            <- operator text, never touched
...
<!-- pynanoclaw:agent-section:start ... -->
- entry (source: ...; trust 0.90; 2026-11-29)
<!-- pynanoclaw:agent-section:end -->
...                       <- operator text, never touched
```
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from datetime import date

from memory_store.files._atomic import atomic_write_text, read_regular
from memory_store.files._audit import AuditLog
from memory_store.files._coreedits import record_edits
from memory_store.files._fileformat import content_hash
from memory_store.files._group import CORE_FILES, GroupDirectory

AGENT_SECTION_START = (
    "<!-- pynanoclaw:agent-section:start (kept by the assistant within rules; "
    "edit outside these markers) -->"
)
AGENT_SECTION_END = "<!-- pynanoclaw:agent-section:end -->"
#: Bound on the section's entries, characters; the prompt budget is the reason.
SECTION_MAX_CHARS = 2000
ENTRY_MAX_CHARS = 300
_ENTRY = re.compile(r"^- (?P<text>.*?) \(source: (?P<meta>[^()]*)\)$")


class CoreSectionError(Exception):
    """The file's markers are damaged (one missing, out of order, repeated): nothing is
    written, so no operator text can be lost; a human fixes the markers."""


def clean_text(text: str) -> str:
    """One line, no markers, no characters that would end the entry's metadata early."""
    flat = " ".join(text.replace("<!--", " ").replace("-->", " ").split())
    return flat.replace("(", "[").replace(")", "]")


def entry_id(text: str) -> str:
    return "core-" + hashlib.sha256(clean_text(text).casefold().encode()).hexdigest()[:16]


def split_section(text: str) -> tuple[str, list[str], str]:
    """(text before the section, its entry lines, text after). Without markers the whole
    file is "before" and the section is empty."""
    starts, ends = text.count(AGENT_SECTION_START), text.count(AGENT_SECTION_END)
    if starts == 0 and ends == 0:
        return text, [], ""
    if starts != 1 or ends != 1 or text.index(AGENT_SECTION_START) > text.index(AGENT_SECTION_END):
        raise CoreSectionError(
            "the agent-section markers are damaged; fix or remove them by hand"
        )
    before, rest = text.split(AGENT_SECTION_START, 1)
    inner, after = rest.split(AGENT_SECTION_END, 1)
    lines = [line for line in inner.splitlines() if line.strip()]
    return before, lines, after


def agent_entries(gd: GroupDirectory, name: str) -> list[str]:
    """The entry texts of ``name``'s agent section, oldest first."""
    _, lines, _ = split_section(_read(gd, name))
    return [m.group("text") for line in lines if (m := _ENTRY.match(line))]


def _read(gd: GroupDirectory, name: str) -> str:
    if name not in CORE_FILES:
        raise ValueError(f"not a core memory file: {name!r}")
    try:
        return read_regular(gd.path / name).decode("utf-8")
    except FileNotFoundError:
        return ""


def _join(before: str, lines: list[str], after: str, present: bool) -> str:
    body = "\n".join(lines)
    if present:
        return f"{before}{AGENT_SECTION_START}\n{body}\n{AGENT_SECTION_END}{after}"
    # An operator file without the section gets it appended after its last byte.
    sep = "" if not before or before.endswith("\n\n") else (
        "\n" if before.endswith("\n") else "\n\n")
    return f"{before}{sep}{AGENT_SECTION_START}\n{body}\n{AGENT_SECTION_END}\n"


def add_agent_entry(
    gd: GroupDirectory,
    name: str,
    text: str,
    *,
    source: str,
    trust: float,
    actor: str,
    turn_id: str | None = None,
    today: date,
    max_chars: int = SECTION_MAX_CHARS,
) -> bool:
    """Add ``text`` to ``name``'s agent section (``CLAUDE.md`` or ``user_profile.md``);
    False when it was there already.

    Raises ``ValueError`` for an empty or over-long entry, ``CoreSectionError`` for
    damaged markers. Every change is appended to the audit log with its source.
    """
    clean = clean_text(text)
    if not clean:
        raise ValueError("empty core memory entry")
    if len(clean) > ENTRY_MAX_CHARS:
        raise ValueError(f"core memory entries are at most {ENTRY_MAX_CHARS} characters")
    eid = entry_id(clean)
    line = f"- {clean} (source: {clean_text(source)}; trust {trust:.2f}; {today.isoformat()})"
    audit = AuditLog(gd.path)
    with gd.lock():
        record_edits(gd, audit)  # a hand edit just before stays told apart from this
        old = _read(gd, name)
        before, lines, after = split_section(old)
        known = {entry_id(m.group("text")) for x in lines if (m := _ENTRY.match(x))}
        if eid in known:
            return False
        lines = [*lines, line]
        evicted: list[str] = []
        while sum(len(x) + 1 for x in lines) > max_chars and len(lines) > 1:
            dropped = lines.pop(0)
            m = _ENTRY.match(dropped)
            evicted.append(entry_id(m.group("text")) if m else dropped[:40])
        new = _join(before, lines, after, AGENT_SECTION_START in old)
        atomic_write_text(gd.path / name, new)
        old_hash = content_hash(old.encode()) if old else None
        new_hash = content_hash(new.encode())
        for gone in evicted:
            audit.append(actor=actor, op="core_evict", memory_id=gone, path=name,
                         old_hash=old_hash, new_hash=new_hash, turn=turn_id,
                         reason="section full")
        audit.append(actor=actor, op="core_add", memory_id=eid, path=name, old_hash=old_hash,
                     new_hash=new_hash, turn=turn_id, source=source, trust=round(trust, 2))
    return True


def entry_source(line: str) -> str | None:
    """The ``source`` of one entry line, or None for a line that is not an entry."""
    m = _ENTRY.match(line)
    return None if m is None else m.group("meta").rsplit("; trust ", 1)[0]


def retire_entries(
    gd: GroupDirectory,
    name: str,
    retire: Callable[[str], bool],
    *,
    actor: str,
    reason: str,
) -> list[str]:
    """Drop the entries of ``name``'s agent section whose source ``retire`` accepts
    (their message was deleted); returns their ids. Each drop is audited
    (``core_evict`` with ``reason``), never with the entry's text. Raises
    ``CoreSectionError`` for damaged markers (nothing written)."""
    audit = AuditLog(gd.path)
    with gd.lock():
        record_edits(gd, audit)
        old = _read(gd, name)
        before, lines, after = split_section(old)
        keep, gone = [], []
        for line in lines:
            src = entry_source(line)
            m = _ENTRY.match(line)
            if src is not None and m is not None and retire(src):
                gone.append(entry_id(m.group("text")))
            else:
                keep.append(line)
        if not gone:
            return []
        new = _join(before, keep, after, True)
        atomic_write_text(gd.path / name, new)
        for eid in gone:
            audit.append(actor=actor, op="core_evict", memory_id=eid, path=name,
                         old_hash=content_hash(old.encode()),
                         new_hash=content_hash(new.encode()), reason=reason)
    return gone

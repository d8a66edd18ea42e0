"""Consolidation: fewer, cleaner records without losing any.

Three passes over the live (not superseded) facts, entities, notes and procedures;
episodes are the record of what happened and are left alone:

1. **Duplicates.** Records of the same kind and entity whose normalized text is equal,
   or whose word sets overlap with Jaccard >= 0.85, are merged: the most trusted (then
   oldest) survives and lists the others in ``merged_from``; the others are superseded.
2. **Contradictions.** Two facts about the same entity contradict when they set the same
   single-valued attribute to different values: an explicit ``attribute`` in their
   metadata, or the same "<subject> lives in|works at|moved to|prefers|'s <x> is ..."
   prefix with a different remainder. The older one is superseded by the newer one,
   unless the newer one is less trusted (then both stay, the newer tagged ``disputed``).
3. **Entities.** Facts carrying ``metadata.entity`` are folded into one file per entity
   (``entities/entity-<slug>.md``), each fact a bullet with its source, date and trust;
   the file's trust is the lowest of its live facts (folding never raises trust); the
   folded facts are superseded by the entity file.

``reconcile_facts`` runs passes 2 and 3 for a few entities only, after their new facts were
written (fact extraction after a turn), first superseding the facts the caller says the
new ones replace (same entity only; a less trusted one is tagged ``disputed`` instead).

Superseding sets ``valid_to`` (and ``superseded_by``); nothing is deleted, so search
with ``include_superseded`` still finds the history. Running it twice changes nothing
the second time (the passes only act on live records that need it).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory_store._errors import MemoryNotFound
from memory_store._protocol import MemoryRecord
from memory_store.files._fileformat import now_utc

if TYPE_CHECKING:
    from memory_store._base import BaseMemory

Progress = Callable[[int, int], None]
CONSOLIDATED_KINDS = ("fact", "entity", "note", "procedure")
NEAR_DUP_JACCARD = 0.85
FACTS_HEADING = "## Facts"
_WORDS = re.compile(r"[\w']+")
_SINGLE_VALUED = re.compile(
    r"^(?P<key>.{1,80}?(?:\b(?:lives in|lives at|works at|works for|works as|moved to|"
    r"prefers|is based in|is located in|is married to|is called|is named)\b|"
    r"(?:'s|\bs)\s+(?:\w+\s+){0,3}?(?:is|are)\b))\s+(?P<value>.+)$")


def normalized_words(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def attribute_key(record: MemoryRecord) -> str | None:
    """The single-valued attribute a fact sets, or None when it sets none we know."""
    explicit = record.metadata.get("attribute")
    if isinstance(explicit, str) and explicit.strip():
        return "attr:" + explicit.strip().lower()
    m = _SINGLE_VALUED.match(normalized_words(record.content).replace(" s ", "'s "))
    if m is None:
        m = _SINGLE_VALUED.match(record.content.strip().lower())
    return None if m is None else "text:" + normalized_words(m.group("key"))


def entity_of(record: MemoryRecord) -> str | None:
    value = record.metadata.get("entity")
    return value.strip() if isinstance(value, str) and value.strip() else None


def entity_slug(name: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return s[:80] or "unnamed"


def _is_entity_file(record: MemoryRecord) -> bool:
    return bool(record.metadata.get("entity_file"))


class _Run:
    def __init__(self, mem: BaseMemory, progress: Progress | None,
                 only: set[str] | None = None) -> None:
        self.mem = mem
        self.progress = progress
        #: entity slugs the contradiction and folding passes are limited to (None: all)
        self.only = only
        self.now = now_utc()
        self.changed: set[str] = set()
        self.superseded: set[str] = set()

    def supersede(self, victim: MemoryRecord, by: str, reason: str) -> None:
        if victim.id in self.superseded:
            return
        self.mem.update_sync(victim.id, victim.content, actor="consolidate", changes={
            "valid_to": self.now, "superseded_by": by, "superseded_reason": reason})
        self.superseded.add(victim.id)
        self.changed.add(victim.id)

    def _skipped(self, rec: MemoryRecord) -> bool:
        return self.only is not None and entity_slug(entity_of(rec) or "") not in self.only

    def replace(self, old_id: str, new_id: str) -> None:
        """Supersede fact ``old_id`` by ``new_id`` of the same entity (a caller's claim
        that one updates the other), unless the new one is less trusted: then both stay
        and the new one is tagged ``disputed``, as for a detected contradiction."""
        try:
            old, new = self.mem.read_sync(old_id), self.mem.read_sync(new_id)
        except MemoryNotFound:
            return
        same = entity_of(old) and (
            entity_slug(entity_of(old) or "") == entity_slug(entity_of(new) or ""))
        if (old.id == new.id or not same or _is_entity_file(old)
                or old.kind not in ("fact", "entity") or old.id in self.superseded):
            return
        if old.metadata.get("superseded_reason") not in (None, "folded"):
            return  # superseded already, for good
        self.contradicted(old, new)

    def contradicted(self, old: MemoryRecord, new: MemoryRecord) -> None:
        """``new`` contradicts ``old``: ``old`` is superseded by it (a fact folded into
        its entity file only learns by what), unless ``new`` is less trusted: then both
        stay and ``new`` is tagged ``disputed``."""
        if new.trust < old.trust:
            if "disputed" not in new.tags:
                self.mem.update_sync(new.id, new.content, actor="consolidate",
                                     changes={"tags": [*new.tags, "disputed"],
                                              "disputes": old.id})
                self.changed.add(new.id)
        elif old.metadata.get("superseded_reason") == "folded":
            self.mem.update_sync(old.id, old.content, actor="consolidate", changes={
                "superseded_by": new.id, "superseded_reason": "contradicted"})
            self.changed.add(old.id)
        else:
            self.supersede(old, new.id, "contradicted")

    def live(self) -> list[MemoryRecord]:
        return [r for r in self.mem.records({"kind": list(CONSOLIDATED_KINDS)})
                if r.id not in self.superseded]

    # -- pass 1 ------------------------------------------------------------------------

    def merge_duplicates(self) -> None:
        groups: dict[tuple[str, str], list[MemoryRecord]] = defaultdict(list)
        for rec in self.live():
            if _is_entity_file(rec):
                continue
            groups[(rec.kind, (entity_of(rec) or "").lower())].append(rec)
        for recs in groups.values():
            recs.sort(key=lambda r: (-r.trust, r.created, r.id))
            words = [frozenset(_WORDS.findall(r.content.lower())) for r in recs]
            norms = [normalized_words(r.content) for r in recs]
            for i, keeper in enumerate(recs):
                if keeper.id in self.superseded:
                    continue
                merged = [other for j, other in enumerate(recs[i + 1:], i + 1)
                          if other.id not in self.superseded and (
                              norms[i] == norms[j]
                              or jaccard(words[i], words[j]) >= NEAR_DUP_JACCARD)]
                for other in merged:
                    self.supersede(other, keeper.id, "duplicate")
                if merged:
                    before = list(keeper.metadata.get("merged_from") or [])
                    ids = before + [m.id for m in merged if m.id not in before]
                    sources = sorted({keeper.source, *[m.source for m in merged],
                                      *(keeper.metadata.get("also_from") or [])} - {keeper.source})
                    self.mem.update_sync(keeper.id, keeper.content, actor="consolidate",
                                         changes={"merged_from": ids, "also_from": sources})
                    self.changed.add(keeper.id)

    # -- pass 2 ------------------------------------------------------------------------

    def supersede_contradictions(self) -> None:
        slots: dict[tuple[str, str], list[MemoryRecord]] = defaultdict(list)
        # Facts already folded into an entity file still hold for that entity.
        everything = self.mem.records({"kind": ["fact", "entity"], "include_superseded": True})
        for rec in everything:
            folded = rec.metadata.get("superseded_reason") == "folded"
            live = rec.valid_to is None or rec.valid_to > self.now
            if (_is_entity_file(rec) or rec.id in self.superseded or not (live or folded)
                    or self._skipped(rec)):
                continue
            key = attribute_key(rec)
            if key is not None:
                slots[((entity_of(rec) or "").lower(), key)].append(rec)
        for recs in slots.values():
            if len(recs) < 2:
                continue
            recs.sort(key=lambda r: (r.created, r.id))
            newest = recs[-1]
            for older in recs[:-1]:
                if normalized_words(older.content) != normalized_words(newest.content):
                    self.contradicted(older, newest)

    # -- pass 3 ------------------------------------------------------------------------

    def fold_entities(self) -> None:
        by_entity: dict[str, list[MemoryRecord]] = defaultdict(list)
        names: dict[str, str] = {}
        for rec in self.live():
            name = entity_of(rec)
            if (name is None or _is_entity_file(rec) or rec.kind not in ("fact", "entity")
                    or self._skipped(rec)):
                continue
            by_entity[entity_slug(name)].append(rec)
            names.setdefault(entity_slug(name), name)
        total = len(by_entity)
        for done, (key, facts) in enumerate(sorted(by_entity.items())):
            if self.progress is not None:
                self.progress(done, total)
            self._fold(names[key], f"entity-{key}", sorted(facts, key=lambda r: (r.created,
                                                                                    r.id)))

    def _fold(self, name: str, entity_id: str, facts: list[MemoryRecord]) -> None:
        try:
            current: MemoryRecord | None = self.mem.read_sync(entity_id)
        except MemoryNotFound:
            current = None
        entries: list[dict[str, Any]] = list(current.metadata.get("facts") or []) if current else []
        known = {e.get("id") for e in entries}
        texts = {normalized_words(str(e.get("text", ""))) for e in entries
                 if not e.get("superseded_by")}
        duplicates = []
        for f in facts:
            if f.id in known:
                continue
            if normalized_words(f.content) in texts:
                duplicates.append(f)
                continue
            texts.add(normalized_words(f.content))
            entries.append({"id": f.id, "text": f.content, "source": f.source,
                            "trust": f.trust, "created": f.created.isoformat()})
        # Facts folded earlier that have since been superseded are marked in the file.
        for entry in entries:
            if entry.get("superseded_by"):
                continue
            try:
                rec = self.mem.read_sync(str(entry["id"]))
            except MemoryNotFound:
                continue
            reason = rec.metadata.get("superseded_reason")
            if rec.valid_to is not None and reason == "contradicted":
                entry["superseded_by"] = rec.metadata.get("superseded_by")
        # The file is only as trustworthy as its weakest live fact: folding must never
        # launder a member's hearsay into an admin-grade record.
        live = [e for e in entries if not e.get("superseded_by")] or entries
        trust = min([float(e.get("trust", 0.5)) for e in live] or [0.5])
        content = entity_body(current.content if current else f"# {name}\n", entries)
        if current is None:
            self.mem.write_sync(content, kind="entity", metadata={
                "id": entity_id, "source": "consolidate", "trust": trust, "entity": name,
                "entity_file": True, "facts": entries, "tags": [name], "actor": "consolidate"})
            self.changed.add(entity_id)
        elif content != current.content or entries != current.metadata.get("facts"):
            self.mem.update_sync(entity_id, content, actor="consolidate",
                                 changes={"facts": entries, "trust": trust})
            self.changed.add(entity_id)
        for f in facts:
            self.supersede(f, entity_id, "duplicate" if f in duplicates else "folded")


def entity_body(body: str, entries: list[dict[str, Any]]) -> str:
    """An entity file's new body: what a person wrote above the generated facts section
    of ``body``, then the facts section rendered from ``entries`` (used by redaction
    too, which rewrites the same section)."""
    return _preserved_head(body) + "\n\n" + _render_facts(entries)


def _preserved_head(body: str) -> str:
    """Whatever a person wrote above the generated facts section."""
    idx = body.find(FACTS_HEADING)
    return (body if idx < 0 else body[:idx]).rstrip()


def _render_facts(entries: list[dict[str, Any]]) -> str:
    live = [e for e in entries if not e.get("superseded_by")]
    old = [e for e in entries if e.get("superseded_by")]
    lines = [FACTS_HEADING, ""]
    lines += [f"- {e['text']} ({e['source']}, {_day(e.get('created'))},"
              f" trust {float(e.get('trust', 0.5)):.2f})" for e in live]
    if old:
        lines += ["", "### Superseded", ""]
        lines += [f"- ~~{e['text']}~~ ({e['source']}, {_day(e.get('created'))};"
                  f" superseded by {e['superseded_by']})" for e in old]
    return "\n".join(lines)


def _day(value: Any) -> str:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).date().isoformat()
        except ValueError:
            return value
    return "?"


def reconcile_facts(mem: BaseMemory, entities: Iterable[str],
                    replaced: Iterable[tuple[str, str]] = ()) -> int:
    """After new facts about ``entities`` were written (the extraction job): supersede
    the facts they replace (``(old id, new id)`` pairs, same entity only, never by a less
    trusted fact), then the contradiction and folding passes limited to these entities,
    so their entity files are current. Idempotent; returns the records changed."""
    with mem.group.lock():
        run = _Run(mem, None, only={entity_slug(e) for e in entities})
        for old_id, new_id in replaced:
            run.replace(old_id, new_id)
        run.supersede_contradictions()
        run.fold_entities()
        return len(run.changed)


def consolidate(mem: BaseMemory, progress: Progress | None = None) -> int:
    """Run the three passes under the group lock; returns the number of records changed."""
    with mem.group.lock():
        run = _Run(mem, progress)
        run.merge_duplicates()
        run.supersede_contradictions()
        run.fold_entities()
        if progress is not None:
            progress(1, 1)
        return len(run.changed)

"""Redaction: removing words from a group's memory for good, with an audit trail.

Three ways in, one mechanism:

* ``redact_message(mem, message_id)``: a message was deleted on its platform. Its line
  in every episode that covers it (``message_ids`` in the front matter) is replaced by
  ``REDACTED_MARKER``; facts whose only source is that message are superseded (``valid_to``,
  ``superseded_reason: source deleted``) and their text replaced by the marker, as is
  their copy in an entity file, as are core-memory entries whose only source it is
  (dropped from the agent section, audited as ``core_evict``); the message's words
  (``memory_store.maintenance._words``) are also replaced wherever else they occur in the group's
  files (the bot's reply, later episodes, entities, core memory); a fact that held
  them, or citing only messages whose line held them (quotes), is retired too.
* ``edit_message(mem, message_id, text, sender_id=...)``: the author edited a message
  a turn already took. The same path as a deletion, except that the line says the new
  text plus ``EDITED_SUFFIX`` and the old words' verbatim copies become the new words; derived
  facts are retired (``source edited``), no new fact is drawn from the new text here.
* ``redact_phrase(mem, phrase)``: ``/forget <phrase>``: every occurrence of the phrase
  (case-insensitive) in the group's memory files and core files becomes the marker;
  facts that contained it are superseded (``superseded_reason: forgotten``).

Every rewrite goes through ``BaseMemory.update_sync`` (atomic rename under the group
lock, audited with old/new hashes, reindexed). Afterwards the SQLite index is scrubbed:
the catalog zeroes replaced rows as it goes (``secure_delete``), the FTS5 index is
merged (``optimize`` drops the deleted rows' terms) and the WAL truncated, so the words
are in no byte under ``.index/`` either (no VACUUM: 0.2 s instead of 4-7 s at 100,000
records). One ``redact`` audit entry per request names the
request, the message id and the paths, never the removed text.

Idempotent: redacting again finds only the marker, changes nothing, and writes no
second audit entry. ``find_phrase`` is the read-only preview of ``redact_phrase``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memory_store._protocol import MemoryRecord
from memory_store.files._atomic import atomic_write_text, read_regular
from memory_store.files._coreedits import record_edits
from memory_store.files._coresection import CoreSectionError, entry_source, retire_entries
from memory_store.files._episode_lines import chat_ids, scrub_episode
from memory_store.files._episode_lines import episode_ids as _ids
from memory_store.files._episode_lines import line_sender as line_sender
from memory_store.files._episode_lines import message_texts as message_texts
from memory_store.files._fileformat import content_hash, now_utc
from memory_store.files._group import CORE_FILES, GroupDirectory
from memory_store.files._schema import scrub_backups
from memory_store.index._scrub import scrub_catalog
from memory_store.maintenance._words import REDACTED_MARKER as REDACTED_MARKER
from memory_store.maintenance._words import WordFinder as WordFinder
from memory_store.maintenance._words import WordsMatcher, words_matcher
from memory_store.maintenance._words import scrub_value as scrub_value
from memory_store.maintenance._words import words_pattern as words_pattern

if TYPE_CHECKING:
    from memory_store._base import BaseMemory

log = logging.getLogger(__name__)

#: shortest old text of an edit also replaced outside its own episode line, characters
ECHO_MIN_CHARS = 8
#: shortest phrase ``/forget`` accepts (a shorter one would hit too much by accident)
PHRASE_MIN_CHARS = 3
#: what follows an edited message's new text in its episode line
EDITED_SUFFIX = " (edited)"
#: front matter that is structure, not words: a deletion's words (a name, a date, a
#: number) are not taken out of it
_STRUCTURE = frozenset({"id", "message_ids", "participants", "source", "quotes", "entity",
                        "entity_file", "turn_id", "superseded_by", "superseded_reason"})


def _words_of(rec: MemoryRecord, pat: WordFinder, repl: str) -> tuple[str, dict[str, Any]]:
    """``rec``'s content and metadata with ``pat`` replaced by ``repl``; for a deletion's
    words (``WordsMatcher``) not in an episode line's head nor in structural metadata."""
    if not isinstance(pat, WordsMatcher):
        return scrub_value(rec.content, pat, repl), scrub_value(rec.metadata, pat, repl)
    content = scrub_episode(rec.content, _ids(rec), pat, repl) if rec.kind == "episode" \
        else scrub_value(rec.content, pat, repl)
    return content, {k: v if k in _STRUCTURE else scrub_value(v, pat, repl)
                     for k, v in rec.metadata.items()}


@dataclass(frozen=True)
class Hit:
    """A memory that holds the words (preview): where, from whom, how trusted."""

    id: str
    kind: str
    path: str
    source: str
    trust: float
    count: int


@dataclass
class Redaction:
    """What one request changed. ``removed`` holds the words taken out, for the caller
    to scrub its own copies (queues); it is never logged nor audited."""

    request: str
    paths: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list, repr=False)
    #: an edit by someone other than the message's author: nothing was applied
    refused: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.paths)


def only_from(source: str, message_id: str, chat: str | None = None) -> bool:
    """Whether ``source`` (``<group>:msg/<id>,<id>``) names ``message_id`` alone (and,
    with ``chat``, names that chat: see ``chat_ids``)."""
    head, sep, ids = source.rpartition(":msg/")
    return bool(head and sep) and ids.split(",") == [message_id] and chat in (None, head)


def _core_words(text: str, pat: WordFinder, repl: str) -> str:
    """A core file with a deletion's words replaced, each entry's ``(source: ...; trust
    ...; date)`` tail kept: it is structure, read back by ``memory_store.files._coresection``."""
    out = []
    for line in text.split("\n"):
        head, sep, tail = line.rpartition(" (source: ") if entry_source(line) is not None \
            else (line, "", "")
        out.append(scrub_value(head, pat, repl) + sep + tail)
    return "\n".join(out)


def _is_fact(record: MemoryRecord) -> bool:
    """A fact record (an entity file folds facts; it is not one)."""
    return record.kind in ("fact", "entity") and not record.metadata.get("entity_file")


class _Run:
    """One request's rewrites, under the group lock."""

    def __init__(self, mem: BaseMemory, request: str, actor: str) -> None:
        self.mem = mem
        self.actor = actor
        self.out = Redaction(request)
        self.now = now_utc()
        with mem.catalog.lock:  # what the rewrites free is zeroed, not left in free pages
            mem.catalog.conn.execute("PRAGMA secure_delete=ON")

    def records(self) -> list[MemoryRecord]:
        return self.mem.records({"include_superseded": True})

    def rewrite(self, rec: MemoryRecord, content: str, pat: WordFinder | None, *,
                supersede: str | None = None, extra: dict[str, Any] | None = None,
                repl: str = REDACTED_MARKER) -> None:
        """Write ``rec`` with ``content`` and its metadata scrubbed by ``pat`` (matches
        become ``repl``; and the ``extra`` changes); ``supersede`` (a reason) also ends
        its validity."""
        changes: dict[str, Any] = dict(extra or {})
        if pat is not None:
            for key, new in _words_of(rec, pat, repl)[1].items():
                if new != rec.metadata[key] and key not in changes:
                    changes[key] = new
        if supersede is not None and (rec.valid_to is None or rec.valid_to > now_utc()
                                      or rec.metadata.get("superseded_reason") != supersede):
            changes.update({"valid_to": self.now, "superseded_by": "redaction",
                            "superseded_reason": supersede})
            self.out.superseded.append(rec.id)
        if content == rec.content and not changes:
            return
        path, _ = self.mem._load(rec.id)
        self.mem.update_sync(rec.id, content, actor=self.actor, changes=changes)
        self.out.paths.append(self.mem.group.rel(path))
        self.out.records.append(rec.id)

    def echo(self, pat: WordFinder | None, skip: set[str], repl: str = REDACTED_MARKER, *,
             retire: str | None = None) -> None:
        """Replace ``pat`` by ``repl`` in every other memory and in the core files.
        With ``retire`` (a deletion's reason), a fact that held it is superseded."""
        if pat is None:
            return
        for rec in self.records():
            if rec.id in skip:
                continue
            content, meta = _words_of(rec, pat, repl)
            if content == rec.content and meta == rec.metadata:
                continue
            if retire is not None and _is_fact(rec):
                self.rewrite(rec, REDACTED_MARKER, pat, supersede=retire)
            else:
                self.rewrite(rec, content, pat, repl=repl)
        self.core_files(pat, repl)

    def core_files(self, pat: WordFinder, repl: str = REDACTED_MARKER) -> None:
        """Replace ``pat`` by ``repl`` in the group's core files."""
        gd = self.mem.group
        for name in CORE_FILES:
            path = gd.path / name
            try:
                old = read_regular(path).decode("utf-8")
            except FileNotFoundError:
                continue
            new = _core_words(old, pat, repl) if isinstance(pat, WordsMatcher) else \
                scrub_value(old, pat, repl)
            if new == old:
                continue
            record_edits(gd, self.mem.audit)  # a hand edit just before stays noticed
            atomic_write_text(path, new, durable=self.mem.durable)
            self.mem.audit.append(actor=self.actor, op="update", memory_id=name, path=name,
                                  old_hash=content_hash(old.encode()),
                                  new_hash=content_hash(new.encode()))
            self.out.paths.append(name)

    def entity_files(self, gone: set[str], pat: WordFinder | None = None) -> None:
        """Mark facts redacted in the entity files that folded them: those of ``gone``
        and (with ``pat``) those whose text it finds."""
        if not gone and pat is None:
            return
        from memory_store.maintenance._consolidate import entity_body

        for rec in self.records():
            facts = rec.metadata.get("facts")
            if not rec.metadata.get("entity_file") or not isinstance(facts, list):
                continue
            entries = [dict(e) if isinstance(e, dict) else e for e in facts]
            hit = False
            for e in entries:
                if isinstance(e, dict) and e.get("text") != REDACTED_MARKER and (
                        e.get("id") in gone
                        or (pat is not None and pat.search(str(e.get("text"))))):
                    e.update(text=REDACTED_MARKER, superseded_by="redaction")
                    hit = True
            if not hit:
                continue
            content = entity_body(rec.content, entries)
            self.rewrite(rec, content, None, extra={"facts": entries})

    def finish(self, op_detail: dict[str, Any], scrub: bool, pat: WordFinder | None = None,
               repl: str = REDACTED_MARKER) -> Redaction:
        if pat is not None:  # the copies a migration kept (memory_store/files/_schema.py) too
            self.out.paths += scrub_backups(self.mem.group.path,
                                            lambda text: scrub_value(text, pat, repl))
        if self.out.changed:
            if scrub:
                scrub_index(self.mem)
            self.mem.audit.append(actor=self.actor, op="redact", memory_id=self.out.request,
                                  path=",".join(sorted(set(self.out.paths))), old_hash=None,
                                  new_hash=None, superseded=sorted(set(self.out.superseded)),
                                  **op_detail)
        return self.out


def redact_message(mem: BaseMemory, message_id: str, *, request: str,
                   actor: str = "redaction", scrub: bool = True,
                   replied: Collection[str] = (), chat: str | None = None) -> Redaction:
    """Remove the text of deleted message ``message_id`` from ``mem`` (see the module
    docstring). ``request`` names the request in the audit log. With ``scrub`` False
    the caller runs ``scrub_index`` itself (once after several requests, and again
    when a retry finds the files already redacted). ``replied``: the platform ids of
    bot replies that repeated its words (``memory_store.maintenance._quotes``).
    ``chat``: the chat the message was in, for a memory several chats write (a linked
    person's): only its records' ids are matched (``chat_ids``); None: every id in
    ``mem`` is its own chat's."""
    return _change_message(mem, str(message_id), None, None, request=request, actor=actor,
                           scrub=scrub, replied=replied, chat=chat)


def edit_message(mem: BaseMemory, message_id: str, text: str, *, sender_id: str,
                 request: str, actor: str = "redaction", scrub: bool = True,
                 chat: str | None = None) -> Redaction:
    """Apply the edit of ``message_id`` by ``sender_id`` to ``mem``: its line in each
    episode says ``text`` + ``EDITED_SUFFIX`` instead of the old words, which become ``text``
    wherever else they occur verbatim (when at least ``ECHO_MIN_CHARS`` long and not
    part of ``text``); what was derived from the old words alone is retired as for a
    deletion (``source edited``). Nothing is applied (``refused``, logged) unless
    ``sender_id`` wrote that line in every episode: only the author edits. A deleted
    (redacted) line stays deleted. ``removed`` holds the old words. ``chat``: as for
    ``redact_message`` (another chat's message of the same id is not this one)."""
    return _change_message(mem, str(message_id), text, str(sender_id), request=request,
                           actor=actor, scrub=scrub, chat=chat)


def unmarked(text: str) -> str:
    """A message line's words without the ``EDITED_SUFFIX`` mark an earlier edit left."""
    return text[:-len(EDITED_SUFFIX)] if text.endswith(EDITED_SUFFIX) else text


def _change_message(mem: BaseMemory, message_id: str, text: str | None,
                    sender_id: str | None, *, request: str, actor: str, scrub: bool,
                    replied: Collection[str] = (), chat: str | None = None) -> Redaction:
    """A deletion (``text`` None) or an edit of ``message_id``: one path for both."""
    line = REDACTED_MARKER if text is None else text + EDITED_SUFFIX
    reason = "source deleted" if text is None else "source edited"
    with mem.group.lock():
        run = _Run(mem, request, actor)
        episodes: list[tuple[MemoryRecord, tuple[int, int]]] = []
        derived: list[MemoryRecord] = []
        for rec in run.records():
            ids = chat_ids(rec, chat)
            if message_id not in ids:
                continue
            if rec.kind == "episode":
                span = message_texts(rec.content, ids).get(message_id)
                if span is None:
                    log.warning("episode %s covers %s but its lines do not match its "
                                "message ids; left as is", rec.id, message_id)
                    continue
                if sender_id is not None and line_sender(rec.content, span) != sender_id:
                    log.warning("edit of %s in %s by %s, not its author: not applied",
                                message_id, mem.group.group, sender_id)
                    run.out.refused = True
                    return run.out
                old = rec.content[span[0]:span[1]].strip()
                if old and old != REDACTED_MARKER and (text is None or unmarked(old) != text):
                    run.out.removed.append(unmarked(old))
                    episodes.append((rec, span))
            elif ids == [message_id]:
                derived.append(rec)
        if text is not None and not episodes:
            return run.out  # an edit changes nothing derived from words it did not find
        pat: WordFinder | None
        if text is None:  # a deletion: its words (memory_store.maintenance._words) go everywhere
            pat = words_matcher(run.out.removed)
            if pat is not None:  # and what was drawn only from messages quoting them
                from memory_store.maintenance._quotes import (
                    quoting_messages,  # it imports this module
                )

                quoting = quoting_messages(mem, message_id, pat, replied, chat) | {message_id}
                have = {r.id for r in derived}
                derived += [r for r in run.records() if _is_fact(r) and r.id not in have
                            and (own := chat_ids(r, chat)) and set(own) <= quoting]
        else:
            pat = words_pattern([t for t in run.out.removed if len(t) >= ECHO_MIN_CHARS
                                 and t.casefold() not in text.casefold()])
        repl = REDACTED_MARKER if text is None else text
        for rec in derived:
            run.rewrite(rec, REDACTED_MARKER, pat, supersede=reason)
        run.entity_files({r.id for r in derived}, pat if text is None else None)
        for name in CORE_FILES:  # entries the agent added to core memory from it
            try:
                if retire_entries(mem.group, name,
                                  lambda src: only_from(src, message_id, chat),
                                  actor=actor, reason=reason):
                    run.out.paths.append(name)
            except CoreSectionError as err:
                log.warning("%s of %s: %s; its entries are left", name, mem.group.group, err)
        run.echo(pat, {r.id for r, _ in episodes} | {r.id for r in derived}, repl,
                 retire=reason if text is None else None)
        for rec, (start, end) in episodes:  # last: a crashed run can still find the text
            fresh = mem._load(rec.id)[1]
            span = message_texts(fresh.content, _ids(fresh)).get(message_id, (start, end))
            head, tail = fresh.content[:span[0]], fresh.content[span[1]:]
            content = head + line + tail
            if isinstance(pat, WordsMatcher):  # the other lines' texts and the reply
                content = scrub_episode(content, _ids(fresh), pat, repl)
            elif pat is not None:
                content = scrub_value(head, pat, repl) + line + scrub_value(tail, pat, repl)
            run.rewrite(fresh, content, pat, repl=repl)
        detail = {"reason": "deletion" if text is None else "edit", "message_id": message_id}
        return run.finish(detail, scrub, pat, repl)


def message_lines(mem: BaseMemory, message_id: str, chat: str | None = None) -> list[str]:
    """The text of ``message_id``'s line (of ``chat``: see ``redact_message``) in each
    episode that covers it (none once redacted), read-only: for a caller that scrubs
    its own copies before memory."""
    out: list[str] = []
    for rec in mem.records({"include_superseded": True, "kind": "episode"}):
        ids = chat_ids(rec, chat)
        if message_id not in ids:
            continue
        span = message_texts(rec.content, ids).get(message_id)
        text = "" if span is None else rec.content[span[0]:span[1]].strip()
        if text and text != REDACTED_MARKER:
            out.append(unmarked(text))
    return out


def redact_phrase(mem: BaseMemory, phrase: str, *, request: str,
                  actor: str = "redaction", scrub: bool = True) -> Redaction:
    """Replace every occurrence of ``phrase`` (case-insensitive) in ``mem``'s files by
    the marker; facts that held it are superseded. Raises ``ValueError`` for a phrase
    shorter than ``PHRASE_MIN_CHARS``."""
    phrase = validated_phrase(phrase)
    pat = words_pattern([phrase])
    assert pat is not None
    with mem.group.lock():
        run = _Run(mem, request, actor)
        for rec in run.records():
            content = pat.sub(REDACTED_MARKER, rec.content)
            if content == rec.content and scrub_value(rec.metadata, pat) == rec.metadata:
                continue
            run.rewrite(rec, content, pat, supersede="forgotten" if _is_fact(rec) else None)
        run.core_files(pat)
        if run.out.changed:
            run.out.removed.append(phrase)
        return run.finish({"reason": "forget"}, scrub, pat)


def validated_phrase(phrase: str) -> str:
    """``phrase`` with outer whitespace removed; ``ValueError`` if it is too short."""
    phrase = " ".join(phrase.split())
    if len(phrase) < PHRASE_MIN_CHARS or phrase.casefold() == REDACTED_MARKER:
        raise ValueError(f"say what to forget, at least {PHRASE_MIN_CHARS} characters")
    return phrase


def find_phrase(gd: GroupDirectory, phrase: str) -> list[Hit]:
    """The memories and core files holding ``phrase`` (case-insensitive), read-only:
    no lock, no index, nothing written (the preview of ``redact_phrase``)."""
    from memory_store.files._fileformat import parse_memory_file
    from memory_store.files._paths import id_from_filename

    pat = words_pattern([validated_phrase(phrase)])
    assert pat is not None
    hits: list[Hit] = []
    for path in [*(gd.path / name for name in CORE_FILES), *sorted(gd.memory_files())]:
        try:
            text = read_regular(path).decode("utf-8", errors="replace")
        except FileNotFoundError:
            continue
        if not (n := len(pat.findall(text))):
            continue
        if path.parent == gd.path:  # a core file
            hits.append(Hit(path.name, "core", path.name, "core memory", 1.0, n))
            continue
        rec = parse_memory_file(text, fallback_id=id_from_filename(path.name), fallback_kind="note",
                                mtime=now_utc())
        hits.append(Hit(rec.id, rec.kind, gd.rel(path), rec.source, rec.trust, n))
    return hits


def scrub_index(mem: BaseMemory) -> None:
    """Leave no removed byte in ``.index/`` (``memory_store.index._scrub``); a WAL still
    held by another process after the retries is logged (the next scrub finishes it)."""
    if not scrub_catalog(mem.catalog):
        log.warning("index of %s: WAL not truncated (another process holds it)",
                    mem.group.group)

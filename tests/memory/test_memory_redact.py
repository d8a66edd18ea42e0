"""Redaction (memory_store.maintenance._redact) on every backend: the words leave every file under
the group directory, the index finds nothing, the audit log says so without them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from channels.models import Inbound
from memory_store import BaseMemory
from memory_store.files import AuditLog, add_agent_entry, agent_entries
from memory_store.maintenance import (
    EDITED_SUFFIX,
    REDACTED_MARKER,
    consolidate,
    edit_message,
    find_phrase,
    message_texts,
    redact_message,
    redact_phrase,
)
from workers.turn import Batch, episode_text

SECRET = "my door code is 4417 Zanzibar"
GROUP = "test:g1"


def _msg(mid: str, text: str, sender: str = "7", name: str = "Ann") -> Inbound:
    return Inbound(channel="test", chat_id="g1", is_group=True, sender_id=sender,
                   sender_name=name, message_id=mid, text=text,
                   received_at=datetime(2026, 11, 30, 10, 0, tzinfo=UTC))


async def _episode(mem: BaseMemory, msgs: list[Inbound], reply: str, eid: str) -> str:
    batch = Batch(group=GROUP, messages=msgs, engaged_ids=[m.message_id for m in msgs],
                  raw=[])
    return await mem.write(episode_text(batch, reply), kind="episode", metadata={
        "id": eid, "source": f"{GROUP}:msg/" + ",".join(m.message_id for m in msgs),
        "message_ids": [m.message_id for m in msgs], "trust": 0.8})


async def index_finds(mem: BaseMemory, word: str) -> list[str]:
    """Ids whose indexed text holds ``word``: the FTS5 table itself, and any search
    result (a vector search always returns neighbours: their text must not hold it)."""
    with mem.catalog.lock:
        rows = mem.catalog.conn.execute("SELECT rowid FROM fts WHERE fts MATCH ?",
                                        (word,)).fetchall()
    hits = await mem.search(word, k=10, filters={"include_superseded": True})
    return [str(r[0]) for r in rows] + [h.id for h in hits if word in h.content.lower()]


def files_holding(root: Path, words: str) -> list[str]:
    """Every file under ``root`` (index, audit log, lock included) whose bytes hold
    ``words`` in any case."""
    needle = words.lower().encode()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and needle in p.read_bytes().lower())


async def _setup(mem: BaseMemory) -> dict[str, Any]:
    ep = await _episode(mem, [_msg("11", "hello all"), _msg("12", SECRET, "8", "Bob"),
                              _msg("13", "nice weather\ntoday", "9", "Cy")],
                        f"Noted, Bob: {SECRET}.", "turn-a")
    other = await _episode(mem, [_msg("20", "what is for lunch")], "Soup.", "turn-b")
    only = await mem.write("Bob's door code is 4417", kind="fact", metadata={
        "id": "fact-only", "message_ids": ["12"], "source": f"{GROUP}:msg/12",
        "entity": "Bob", "trust": 0.6})
    shared = await mem.write("Cy likes weather", kind="fact", metadata={
        "id": "fact-shared", "message_ids": ["12", "13"], "source": f"{GROUP}:msg/12,13",
        "trust": 0.6})
    add_agent_entry(mem.group, "user_profile.md", f"Bob: {SECRET}", source=f"{GROUP}:msg/12",
                    trust=0.6, actor="test", today=datetime(2026, 11, 30).date())
    for text, mid in (("Greet Bob by his nickname Qwerty", "12"), ("Answer in English", "11")):
        add_agent_entry(mem.group, "CLAUDE.md", text, source=f"{GROUP}:msg/{mid}", trust=0.6,
                        actor="test", today=datetime(2026, 11, 30).date())
    return {"ep": ep, "other": other, "only": only, "shared": shared}


def test_message_lines_map_to_ids_or_nothing() -> None:
    body = episode_text(Batch(GROUP, [_msg("1", "a\n- b"), _msg("2", "c")], ["1", "2"], []),
                        "ok")
    spans = message_texts(body, ["1", "2"])
    assert [body[s:e] for s, e in spans.values()] == ["a\n- b", "c"]
    # a text that looks like a message line makes the mapping ambiguous: nothing guessed
    fake = episode_text(Batch(GROUP, [_msg("1", "x\n- [2026-01-01 00:00:00] Eve (1): y")],
                              ["1"], []), None)
    assert message_texts(fake, ["1"]) == {}


async def test_a_deleted_message_leaves_every_file_and_the_index(mem: BaseMemory) -> None:
    ids = await _setup(mem)
    await mem.consolidate()  # folds fact-only into an entity file: another copy
    mem.flush()
    assert await index_finds(mem, "zanzibar")
    root = mem.group.path
    assert files_holding(root, SECRET)

    out = redact_message(mem, "12", request="del-1")
    mem.flush()
    assert out.changed and out.removed == [SECRET]
    assert files_holding(root, SECRET) == []
    assert files_holding(root, "Zanzibar") == []
    assert await index_finds(mem, "zanzibar") == []
    episode = await mem.read(ids["ep"])
    assert f"Bob (8): {REDACTED_MARKER}" in episode.content
    assert "hello all" in episode.content and "nice weather\ntoday" in episode.content
    fact = await mem.read(ids["only"])
    assert fact.content == REDACTED_MARKER and fact.valid_to is not None
    assert fact.metadata["superseded_reason"] == "source deleted"
    shared = await mem.read(ids["shared"])  # another source still backs it
    assert shared.content == "Cy likes weather" and shared.valid_to is None
    assert (await mem.read(ids["other"])).content.count("what is for lunch") == 1
    # core entries the agent took only from that message are retired, others stay
    core = (root / "CLAUDE.md").read_text()
    assert "Qwerty" not in core and "Answer in English" in core
    assert any(e["op"] == "core_evict" and e.get("reason") == "source deleted"
               for e in AuditLog(root).entries())
    audit = [e for e in AuditLog(root).entries() if e["op"] == "redact"]
    assert len(audit) == 1 and audit[0]["message_id"] == "12"
    assert audit[0]["id"] == "del-1" and "user_profile.md" in audit[0]["path"]

    again = redact_message(mem, "12", request="del-1")
    assert not again.changed
    assert [e for e in AuditLog(root).entries() if e["op"] == "redact"] == audit


async def test_an_unknown_message_id_changes_nothing(mem: BaseMemory) -> None:
    await _setup(mem)
    root = mem.group.path
    before = {p: p.read_bytes() for p in root.rglob("*.md")}
    out = redact_message(mem, "999", request="del-x")
    assert not out.changed and out.removed == []
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == before


async def test_forget_a_phrase_preview_then_redact(mem: BaseMemory) -> None:
    ids = await _setup(mem)
    consolidate(mem)
    hits = find_phrase(mem.group, "4417 ZANZIBAR")
    assert {h.path for h in hits} >= {"user_profile.md"}
    assert ids["ep"] in {h.id for h in hits}
    root = mem.group.path
    before = {p: p.read_bytes() for p in root.rglob("*.md")}
    assert find_phrase(mem.group, "4417 zanzibar") == hits  # read-only
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == before

    out = redact_phrase(mem, "4417 zanzibar", request="forget-1")
    mem.flush()
    assert files_holding(root, "4417 zanzibar") == []
    assert await index_finds(mem, "zanzibar") == []
    assert find_phrase(mem.group, "4417 zanzibar") == []
    assert "hello all" in (await mem.read(ids["ep"])).content
    entry = [e for e in AuditLog(root).entries() if e["op"] == "redact"]
    assert len(entry) == 1 and "zanzibar" not in str(entry).casefold()
    assert out.paths and not redact_phrase(mem, "4417 zanzibar", request="forget-1").changed


NEW = "my door code is 9021 Quokka"


async def test_an_edit_puts_the_new_words_in_and_the_old_out(mem: BaseMemory) -> None:
    ids = await _setup(mem)
    await mem.consolidate()
    mem.flush()
    root = mem.group.path
    before = {p: p.read_bytes() for p in root.rglob("*.md")}
    # only the author edits: Ann (7) cannot rewrite Bob's (8) words
    refused = edit_message(mem, "12", "FORGED", sender_id="7", request="edit-x")
    assert refused.refused and not refused.changed
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == before

    out = edit_message(mem, "12", NEW, sender_id="8", request="edit-1")
    mem.flush()
    assert out.changed and not out.refused and out.removed == [SECRET]
    episode = (await mem.read(ids["ep"])).content
    assert f"Bob (8): {NEW}{EDITED_SUFFIX}\n" in episode
    assert f"Noted, Bob: {NEW}." in episode  # the reply quoting it says it as it is now
    assert "hello all" in episode and "nice weather\ntoday" in episode
    assert files_holding(root, "Zanzibar") == []
    assert await index_finds(mem, "zanzibar") == []
    assert ids["ep"] in await index_finds(mem, "quokka")
    fact = await mem.read(ids["only"])  # derived from the old words alone: retired
    assert fact.valid_to is not None and fact.metadata["superseded_reason"] == "source edited"
    assert (await mem.read(ids["shared"])).valid_to is None
    assert "Qwerty" not in (root / "CLAUDE.md").read_text()
    [entry] = [e for e in AuditLog(root).entries() if e["op"] == "redact"]
    assert (entry["reason"], entry["message_id"], entry["id"]) == ("edit", "12", "edit-1")
    assert "zanzibar" not in str(entry).casefold() and "quokka" not in str(entry).casefold()

    snapshot = {p: p.read_bytes() for p in root.rglob("*.md")}
    assert not edit_message(mem, "12", NEW, sender_id="8", request="edit-1").changed
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == snapshot
    # a deleted message stays deleted: a late edit does not bring words back
    redact_message(mem, "12", request="del-1")
    assert not edit_message(mem, "12", "back again", sender_id="8", request="e2").changed
    assert f"Bob (8): {REDACTED_MARKER}\n" in (await mem.read(ids["ep"])).content
    assert files_holding(root, "quokka") == []


def test_no_removed_byte_stays_in_the_index_on_a_sqlite_without_secure_delete(
        tmp_path: Path, monkeypatch: Any) -> None:
    """Many SQLite builds do not zero deleted rows by default (this one may): the catalog
    turns ``secure_delete`` on itself, since the scrub no longer rewrites the whole
    index with VACUUM. Simulated here by connections that start with it off."""
    import sqlite3

    from memory_store import open_memory

    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.execute("PRAGMA secure_delete=OFF")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    mem = open_memory(tmp_path, GROUP, "file")
    try:
        for i in range(3000):  # enough rows that freed cells are not all rewritten anyway
            text = f"Note {i} about the harbour, with filler words to fill the rows {i}."
            mem.write_sync(text + (f" {SECRET}" if i % 500 == 7 else ""), kind="fact",
                           metadata={"id": f"n{i}"})
        redact_phrase(mem, "4417 Zanzibar", request="r1", actor="test")
    finally:
        mem.close()
    holding = [p.name for p in tmp_path.rglob("*")
               if p.is_file() and b"zanzibar" in p.read_bytes().lower()]
    assert holding == []


LOCKER = "hello MARK-mx1, my locker combination is Kestrel-4471"
#: the deleted message's qualifying words (memory_store.maintenance._words), as they are quoted
LOCKER_WORDS = ("MARK-mx1", "combination", "Kestrel-4471", "my locker combination")
UNRELATED = "hello everyone, meet me at the station at nine"


async def test_a_deleted_messages_words_leave_replies_later_episodes_and_facts(
        mem: BaseMemory) -> None:
    """Partly quoted: the bot's reply repeats two of its words, a later message and its
    reply a third, a fact drawn from the reply holds one, a fact drawn from the later
    message holds none (it cites a message that quoted the deleted one); all of it goes,
    in every file, the index and its WAL. Text sharing only common words stays."""
    ep = await _episode(mem, [_msg("m1", LOCKER), _msg("m2", UNRELATED, "8", "Bob")],
                        "SEEN: MARK-mx1. A locker combination, noted.", "turn-a")
    later = await _episode(mem, [_msg("m3", "Cy here: was it Kestrel-4471?", "9", "Cy")],
                           "Yes, that is my locker combination from Ann.", "turn-b")
    other = await _episode(mem, [_msg("m5", "hello, my locker is broken", "9", "Cy")],
                           "Meet me at the station.", "turn-c")
    quoted = await mem.write("Ann's code is Kestrel-4471", kind="fact", metadata={
        "id": "fact-reply", "message_ids": ["m4"], "source": f"{GROUP}:msg/m4",
        "entity": "Ann", "trust": 0.5})
    asked = await mem.write("Cy asked about Ann's locker", kind="fact", metadata={
        "id": "fact-asked", "message_ids": ["m3"], "source": f"{GROUP}:msg/m3",
        "entity": "Cy", "trust": 0.5})
    kept = await mem.write("Bob meets people at the station", kind="fact", metadata={
        "id": "fact-kept", "message_ids": ["m2"], "source": f"{GROUP}:msg/m2",
        "entity": "Bob", "trust": 0.5})
    add_agent_entry(mem.group, "user_profile.md", "Ann: combination Kestrel-4471",
                    source=f"{GROUP}:msg/m9", trust=0.6, actor="test",
                    today=datetime(2026, 11, 30).date())
    await mem.consolidate()  # folds the facts into entity files: more copies
    mem.flush()
    root = mem.group.path
    assert all(files_holding(root, w) for w in LOCKER_WORDS)
    unrelated = {i: (await mem.read(i)).content for i in (other, kept)}

    out = redact_message(mem, "m1", request="del-1")
    mem.flush()
    assert out.changed
    for word in LOCKER_WORDS:  # .index/ (catalog, FTS5, WAL) and audit log included
        assert files_holding(root, word) == [], word
    for word in ("kestrel", "combination"):
        assert await index_finds(mem, word) == []
    reply = (await mem.read(ep)).content
    assert f"SEEN: {REDACTED_MARKER}. A locker {REDACTED_MARKER}, noted." in reply
    assert f"Bob (8): {UNRELATED}" in reply  # the rest of the turn stays
    assert f"Cy here: was it {REDACTED_MARKER}?" in (await mem.read(later)).content
    for fact in (quoted, asked):  # retired: it held the words / its source quoted them
        rec = await mem.read(fact)
        assert rec.valid_to is not None and rec.content == REDACTED_MARKER, fact
        assert rec.metadata["superseded_reason"] == "source deleted"
    assert (await mem.read(kept)).metadata.get("superseded_reason") == "folded"  # as was
    bob = [r for r in mem.records() if r.metadata.get("entity_file") and
           "Bob meets people at the station" in r.content]
    assert bob  # its copy in Bob's entity file stays live
    assert not [r.id for r in mem.records() if "Cy asked about" in r.content]  # folded too
    assert {i: (await mem.read(i)).content for i in (other, kept)} == unrelated
    assert "Ann: combination" not in (root / "user_profile.md").read_text()

    snapshot = {p: p.read_bytes() for p in root.rglob("*.md")}
    assert not redact_message(mem, "m1", request="del-1").changed
    assert {p: p.read_bytes() for p in root.rglob("*.md")} == snapshot


async def test_facts_drawn_from_replies_quoting_it_or_the_bots_echo_are_retired(
        mem: BaseMemory) -> None:
    """Followed by id, not by words: a message that replied to the deleted one (its
    text shown as a quote) and one that replied to the bot's reply repeating it
    (platform id P1, which the queue knows) lend their facts to the deletion, though
    none of those facts holds a word of it. A reply to another bot message does not."""
    await _episode(mem, [_msg("m1", LOCKER)], "SEEN: Kestrel-4471", "turn-a")
    for eid, mid, quoted in (("turn-b", "m6", "m1"), ("turn-c", "m7", "P1"),
                             ("turn-d", "m8", "P9")):
        batch = Batch(group=GROUP, messages=[_msg(mid, "which one was that?")],
                      engaged_ids=[mid], raw=[])
        await mem.write(episode_text(batch, "ok"), kind="episode", metadata={
            "id": eid, "source": f"{GROUP}:msg/{mid}", "message_ids": [mid],
            "quotes": {mid: quoted}, "trust": 0.8})
        await mem.write(f"Ann asked about it ({mid})", kind="fact", metadata={
            "id": f"fact-{mid}", "message_ids": [mid], "source": f"{GROUP}:msg/{mid}",
            "entity": "Ann", "trust": 0.5})
    mem.flush()

    redact_message(mem, "m1", request="del-1", replied=["P1"])
    retired = {r.id: r.metadata.get("superseded_reason")
               for r in mem.records({"include_superseded": True, "kind": "fact"})}
    assert retired == {"fact-m6": "source deleted", "fact-m7": "source deleted",
                       "fact-m8": None}


async def test_a_deleted_date_or_name_leaves_the_episode_lines_readable(
        mem: BaseMemory) -> None:
    """A deleted message naming a date and a member: the words go from other texts, but
    the line heads (date, name, id) and structural front matter stay, so the next
    deletion still finds its line."""
    said = "Christopher: 2026-11-30 is the Kestrel-4471 deadline"
    await _episode(mem, [_msg("m1", said)], "ok", "turn-a")
    other = await _episode(mem, [_msg("m2", "see you 2026-11-30", "9", "Christopher")],
                           "Noted for 2026-11-30, Christopher.", "turn-b")
    add_agent_entry(mem.group, "CLAUDE.md", "Christopher prefers tea", source=f"{GROUP}:msg/m9",
                    trust=0.6, actor="test", today=datetime(2026, 11, 30).date())
    redact_message(mem, "m1", request="del-1")
    assert agent_entries(mem.group, "CLAUDE.md") == ["[redacted] prefers tea"]  # still an entry
    assert f"(source: {GROUP}:msg/m9; trust 0.60; 2026-11-30)" in \
        (mem.group.path / "CLAUDE.md").read_text()  # its date kept
    rec = await mem.read(other)
    assert "- [2026-11-30 10:00:00] Christopher (9): see you [redacted]" in rec.content
    assert "Bot: Noted for [redacted], [redacted]." in rec.content
    assert rec.metadata["message_ids"] == ["m2"]
    assert list(message_texts(rec.content, ["m2"])) == ["m2"]  # the line is still readable
    redact_message(mem, "m2", request="del-2")
    assert "Christopher (9): [redacted]\n" in (await mem.read(other)).content


def test_the_wal_is_truncated_while_another_process_checkpoints(tmp_path: Path) -> None:
    """Another worker's automatic checkpoint holds SQLite's checkpoint lock, and a
    truncation asked for meanwhile is answered busy at once (no busy timeout applies):
    the scrub retries, so the WAL it leaves is empty every time. Without the retry about
    three scrubs in ten left the old pages (and the removed words) in the WAL."""
    import sqlite3
    import threading

    from memory_store import open_memory
    from memory_store.index._scrub import scrub_catalog

    mem = open_memory(tmp_path, GROUP, "file")
    other = sqlite3.connect(mem.catalog.db_path, isolation_level=None, timeout=30.0,
                            check_same_thread=False)
    stop = threading.Event()

    def checkpoint_all_the_time() -> None:
        while not stop.is_set():
            other.execute("PRAGMA wal_checkpoint(PASSIVE)")

    try:
        for i in range(2000):
            mem.write_sync(f"Note {i} about the harbour and its boats {i}", kind="fact",
                           metadata={"id": f"n{i}"})
        checkpointer = threading.Thread(target=checkpoint_all_the_time)
        checkpointer.start()
        left = []
        try:
            for i in range(20):
                with mem.catalog.lock:
                    mem.catalog.conn.execute(
                        "UPDATE docs SET mtime_ns = mtime_ns + 1 WHERE rowid % 20 = ?", (i,))
                left.append(scrub_catalog(mem.catalog))
        finally:
            stop.set()
            checkpointer.join()
        assert all(left), f"{left.count(False)} of 20 scrubs left the WAL"
        assert (mem.catalog.db_path.with_name(mem.catalog.db_path.name + "-wal")
                .stat().st_size) == 0
    finally:
        other.close()
        mem.close()

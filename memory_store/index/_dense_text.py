"""What the dense index embeds for a record: its text, its sentences, its window.

Each record gets one vector for its whole text and, when it has several sentences, one
per sentence (up to ``MAX_CHUNKS``): a long chat turn mixes topics, and a question
usually matches one sentence of it. Episodes also get a *window*: the turn together
with the episodes right before and after it in the same session (neighbours in time at
most ``SESSION_GAP`` apart), so the model reads a turn in its context. The window is
read from the catalog, so it always reflects the files as indexed.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3

from memory_store._protocol import MemoryRecord
from memory_store.index._indexdoc import record_from_json

MAX_CHUNKS = 8
#: Episodes further apart in time than this (seconds) are in different sessions: no
#: shared window, no smoothing across. Any value between minutes and days gives the same
#: LoCoMo sessions; one hour is a guess at what separates chat sessions.
SESSION_GAP = 3600.0
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_LABEL = re.compile(r"^([^\n:.!?]{1,40}):\s")


def dense_text(record: MemoryRecord) -> str:
    """What the whole-record vector embeds: the body, plus speaker/entity when absent."""
    extra = [v for k in ("speaker", "entity", "title")
             if isinstance(v := record.metadata.get(k), str) and v not in record.content]
    return " ".join([record.content, *extra]) if extra else record.content


def sentence_chunks(text: str) -> list[str]:
    """The sentences of ``text`` (each keeping a leading "Speaker: " label), or [] when
    there is only one."""
    label_m = _LABEL.match(text)
    label = label_m.group(0) if label_m else ""
    body = text[len(label):]
    parts = [p.strip() for p in _SENTENCE.split(body) if p.strip()]
    if len(parts) < 2:
        return []
    return [label + p for p in parts[:MAX_CHUNKS]]


def record_texts(record: MemoryRecord) -> list[str]:
    """The texts embedded for ``record``: whole text first, then its sentences."""
    return [dense_text(record), *sentence_chunks(record.content)]


def digest(texts: list[str]) -> str:
    return hashlib.blake2b("\x1f".join(texts).encode(), digest_size=16).hexdigest()


def adjacent(conn: sqlite3.Connection, created: float, rowid: int,
             gap: float = SESSION_GAP) -> list[int]:
    """Rowids of the episodes right before and after (created, rowid) in the same
    session, the one before first."""
    out = []
    for sql in ("SELECT rowid, created FROM docs WHERE kind='episode' AND rowid != ?"
                " AND (created, rowid) < (?, ?) ORDER BY created DESC, rowid DESC LIMIT 1",
                "SELECT rowid, created FROM docs WHERE kind='episode' AND rowid != ?"
                " AND (created, rowid) > (?, ?) ORDER BY created, rowid LIMIT 1"):
        row = conn.execute(sql, (rowid, created, rowid)).fetchone()
        if row is not None and abs(float(row[1]) - created) <= gap:
            out.append(int(row[0]))
    return out


def window_text(conn: sqlite3.Connection, rowid: int,
                gap: float = SESSION_GAP) -> str | None:
    """The episode with its session neighbours, in time order (None: no neighbour, not
    an episode, or gone)."""
    row = conn.execute("SELECT created, kind, record FROM docs WHERE rowid=?",
                       (rowid,)).fetchone()
    if row is None or row[1] != "episode":
        return None
    created = float(row[0])
    near = adjacent(conn, created, rowid, gap)
    if not near:
        return None
    parts: list[tuple[float, int, str]] = [(created, rowid, record_from_json(row[2]).content)]
    for r in near:
        j = conn.execute("SELECT created, record FROM docs WHERE rowid=?", (r,)).fetchone()
        parts.append((float(j[0]), r, record_from_json(j[1]).content))
    return " ".join(text for _, _, text in sorted(parts))

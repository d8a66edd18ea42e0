"""How a record is stored in and searched from the index: JSON in ``docs.record``, the
text FTS5 and the dense index see, and the FTS5 query built from a question."""

from __future__ import annotations

import json
import re
from datetime import datetime

from memory_store._protocol import MemoryRecord
from memory_store.files._fileformat import to_datetime
from memory_store.ranking._stopwords import STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)


def record_to_json(record: MemoryRecord) -> str:
    def iso(dt: datetime | None) -> str | None:
        return None if dt is None else dt.isoformat()

    return json.dumps({
        "id": record.id, "kind": record.kind, "content": record.content,
        "source": record.source, "created": iso(record.created),
        "updated": iso(record.updated), "trust": record.trust,
        "valid_from": iso(record.valid_from), "valid_to": iso(record.valid_to),
        "tags": list(record.tags), "metadata": record.metadata,
    }, ensure_ascii=False, default=str)


def record_from_json(text: str, score: float = 0.0) -> MemoryRecord:
    d = json.loads(text)
    created = to_datetime(d["created"])
    updated = to_datetime(d["updated"])
    assert created is not None and updated is not None
    return MemoryRecord(
        id=d["id"], kind=d["kind"], content=d["content"], source=d["source"],
        created=created, updated=updated, trust=float(d["trust"]),
        valid_from=to_datetime(d["valid_from"]), valid_to=to_datetime(d["valid_to"]),
        tags=tuple(d["tags"]), metadata=d["metadata"], score=score,
    )


def index_text(record: MemoryRecord) -> str:
    """What lexical and dense indexes see: the body plus who, what about, and when.

    Names and the date are appended because questions name people and times ("what did
    Caroline do in May 2023?") that the body of a turn often leaves implicit.
    """
    extra: list[str] = []
    meta = record.metadata
    for key in ("speaker", "entity", "title"):
        value = meta.get(key)
        if isinstance(value, str) and value not in record.content:
            extra.append(value)
    participants = meta.get("participants")
    if isinstance(participants, list):
        extra.extend(str(p) for p in participants if str(p) not in record.content)
    extra.extend(record.tags)
    extra.append(f"{record.created.day} {record.created.strftime('%B %Y')}")
    return record.content + "\n" + " ".join(extra)


def fts_terms(query: str) -> list[str]:
    """The query's content words (stopwords dropped; all words if only stopwords) as
    quoted FTS5 phrases, each once, in query order."""
    words = [w.lower() for w in _WORD.findall(query)]
    content = [w for w in words if w not in STOPWORDS]
    chosen = content or words
    return ['"' + w.replace('"', '""') + '"' for w in dict.fromkeys(chosen)]


def fts_query(query: str) -> str | None:
    """An FTS5 OR-query of the query's content words (stopwords dropped), or None."""
    terms = fts_terms(query)
    return " OR ".join(terms) if terms else None

"""One memory <-> one Markdown file with a YAML front matter.

```
---
id: telegram:-100:42
kind: episode
source: telegram:-100:msg/11,12
created: '2026-11-29T10:00:00+00:00'
updated: '2026-11-29T10:00:00+00:00'
trust: 0.8
tags: []
schema: 2
message_ids: [11, 12]
---
the body, verbatim
```

Parsing is lenient because people edit these files by hand: a file without (or with a
broken) front matter still parses, taking its id from the file name, its kind from its
directory and its times from the file's mtime.
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import UTC, date, datetime
from typing import Any

import yaml

from memory_store._protocol import MemoryRecord
from memory_store.files._schema import SCHEMA_VERSION

log = logging.getLogger(__name__)

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

#: Front-matter keys that map onto MemoryRecord fields; everything else is metadata.
CORE_KEYS = ("id", "kind", "source", "created", "updated", "trust", "valid_from", "valid_to",
             "tags", "schema")
DELIM = "---"


def now_utc() -> datetime:
    return datetime.now(UTC)


def to_datetime(value: Any) -> datetime | None:
    """Coerce a front-matter value (datetime, date, ISO string, epoch number) to aware UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"not an ISO 8601 date/time: {value!r}") from exc
    else:
        raise ValueError(f"not a date/time: {value!r}")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def clamp_trust(value: Any, default: float = 0.5) -> float:
    try:
        trust = float(value)
    except (TypeError, ValueError):
        return default
    if math.isnan(trust):
        return default
    return min(1.0, max(0.0, trust))


def tags_of(value: Any) -> tuple[str, ...]:
    """A ``tags`` value (a list, one tag as a string, or nothing) as a tuple of tags."""
    value = value or ()
    return (value,) if isinstance(value, str) else tuple(str(t) for t in value)


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.astimezone(UTC).isoformat()


def _jsonable(value: Any) -> Any:
    """Metadata must survive YAML and JSON unchanged: plain scalars, lists, dicts."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def render_memory_file(record: MemoryRecord) -> str:
    """The file text for ``record`` (front matter + body, ending in one newline)."""
    head: dict[str, Any] = {
        "id": record.id,
        "kind": record.kind,
        "source": record.source,
        "created": _iso(record.created),
        "updated": _iso(record.updated),
        "trust": round(float(record.trust), 4),
    }
    if record.valid_from is not None:
        head["valid_from"] = _iso(record.valid_from)
    if record.valid_to is not None:
        head["valid_to"] = _iso(record.valid_to)
    head["tags"] = list(record.tags)
    head["schema"] = SCHEMA_VERSION  # the version of this format (memory_store/files/_schema.py)
    for key, value in record.metadata.items():
        if key not in CORE_KEYS:
            head[key] = _jsonable(value)
    front = yaml.dump(head, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                      default_flow_style=None, width=1_000_000)
    body = record.content.rstrip("\n")
    return f"{DELIM}\n{front}{DELIM}\n{body}\n"


def split_front_matter(text: str) -> tuple[dict[str, Any] | None, str]:
    """(front matter mapping or None, body). Broken YAML yields (None, whole text)."""
    text = text.removeprefix("\ufeff")
    if not text.startswith(DELIM + "\n") and not text.startswith(DELIM + "\r\n"):
        return None, text
    lines = text.splitlines(keepends=True)
    for i in range(1, len(lines)):
        if lines[i].rstrip("\r\n") == DELIM:
            raw = "".join(lines[1:i])
            body = "".join(lines[i + 1 :])
            try:
                data = yaml.load(raw, Loader=_Loader)  # noqa: S506 - safe loader
            except yaml.YAMLError as exc:
                log.warning("unreadable front matter, treating file as plain text: %s", exc)
                return None, text
            if data is None:
                data = {}
            if not isinstance(data, dict):
                return None, text
            return data, body
    return None, text


def parse_memory_file(text: str, *, fallback_id: str, fallback_kind: str,
                      mtime: datetime) -> MemoryRecord:
    """A MemoryRecord from file text; never raises on hand-edited content."""
    head, body = split_front_matter(text)
    head = head or {}
    content = body.rstrip("\n")

    def _dt(key: str, default: datetime | None) -> datetime | None:
        try:
            return to_datetime(head.get(key)) or default
        except ValueError:
            log.warning("bad %s in memory %s; using default", key, fallback_id)
            return default

    created = _dt("created", mtime) or mtime
    updated = _dt("updated", mtime) or mtime
    raw_id = head.get("id")
    memory_id = str(raw_id) if raw_id not in (None, "") else fallback_id
    raw_kind = head.get("kind")
    kind = str(raw_kind) if raw_kind else fallback_kind
    metadata = {k: v for k, v in head.items() if k not in CORE_KEYS}
    version = head.get("schema")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        # still read (a hand-copied file must not vanish), but said: fields may be missed
        log.warning("memory %s has schema version %d; this version reads up to %d",
                    memory_id, version, SCHEMA_VERSION)
    return MemoryRecord(
        id=memory_id,
        kind=kind,
        content=content,
        source=str(head.get("source") or "file"),
        created=created,
        updated=updated,
        trust=clamp_trust(head.get("trust"), default=0.5),
        valid_from=_dt("valid_from", None),
        valid_to=_dt("valid_to", None),
        tags=tags_of(head.get("tags")),
        metadata=_jsonable(metadata),
    )


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()

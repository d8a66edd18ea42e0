"""What every backend shares: files as the truth, the lock, the audit log, the catalog.

Backends differ only in :meth:`BaseMemory._rank`. All public methods are async and run
the blocking file and SQLite work in a thread, so the event loop never waits on a disk.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from memory_store._errors import InvalidMemoryId, MemoryNotFound
from memory_store._protocol import MemoryRecord
from memory_store.files._atomic import atomic_write_bytes, fsync_dir, read_regular
from memory_store.files._audit import AuditLog
from memory_store.files._fileformat import (
    CORE_KEYS,
    clamp_trust,
    content_hash,
    now_utc,
    parse_memory_file,
    render_memory_file,
    tags_of,
    to_datetime,
)
from memory_store.files._group import GroupDirectory
from memory_store.files._paths import (
    id_from_filename,
    memory_path,
    validate_kind,
    validate_memory_id,
)
from memory_store.index._catalog import Catalog, IndexHook, Progress
from memory_store.index._watch import Inotify
from memory_store.ranking._filters import SearchFilters

log = logging.getLogger(__name__)

#: A summarizer turns a failure context into a short lesson, or None: nothing to learn.
Summarizer = Callable[[dict[str, Any]], "str | Awaitable[str | None] | None"]
DEFAULT_TRUST = 0.5


class BaseMemory:
    """A group's memory over its directory of Markdown files."""

    backend = "base"

    def __init__(self, group: GroupDirectory, *, actor: str = "memory_store",
                 summarizer: Summarizer | None = None, durable: bool = True,
                 watch: str = "auto", hooks: Iterable[IndexHook] = (),
                 inotify: Inotify | None = None) -> None:
        self.group = group.ensure()
        self.actor = actor
        self.summarizer = summarizer
        self.durable = durable
        self.audit = AuditLog(group.path)
        # inotify: the process's shared instance (a worker's), else one per group
        self.catalog = Catalog(group, hooks=hooks, watch=watch, inotify=inotify)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.group.group!r})"

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self.catalog.close()

    def footprint_bytes(self) -> int:
        """Estimated resident memory this open group holds: SQLite's page cache (its
        default 2,000 KiB) plus the catalog's fixed overhead; backends add theirs."""
        return 4 * 1024 * 1024

    def flush(self, timeout: float | None = None) -> None:
        """Finish derived work still pending (vectors); the file backend has none."""
        return None

    async def __aenter__(self) -> BaseMemory:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- the Memory protocol -----------------------------------------------------------

    async def write(self, content: str, *, kind: str, metadata: dict[str, Any]) -> str:
        """Store a new memory and return its id.

        ``metadata`` may carry ``id`` (idempotency: writing an existing id again changes
        nothing and returns the id), ``source``, ``trust``, ``created``, ``valid_from``,
        ``valid_to``, ``tags``, ``actor`` (who, for the audit log); every other key is
        kept in the front matter.
        """
        return await asyncio.to_thread(self.write_sync, content, kind=kind, metadata=metadata)

    async def read(self, memory_id: str) -> MemoryRecord:
        return await asyncio.to_thread(self.read_sync, memory_id)

    async def search(self, query: str, *, k: int = 10,
                     filters: dict[str, Any] | None = None) -> list[MemoryRecord]:
        return await asyncio.to_thread(self.search_sync, query, k=k, filters=filters)

    async def update(self, memory_id: str, new_content: str) -> None:
        await asyncio.to_thread(self.update_sync, memory_id, new_content)

    async def delete(self, memory_id: str) -> None:
        await asyncio.to_thread(self.delete_sync, memory_id)

    async def consolidate(self) -> int:
        from memory_store.maintenance._consolidate import consolidate

        return await asyncio.to_thread(consolidate, self)

    async def reflect(self, context: dict[str, Any]) -> str | None:
        from memory_store.maintenance._reflect import reflect

        return await reflect(self, context)

    # -- synchronous implementations -------------------------------------------------

    def write_sync(self, content: str, *, kind: str,
                   metadata: dict[str, Any] | None = None) -> str:
        meta = dict(metadata or {})
        validate_kind(kind)
        if not isinstance(content, str):
            raise TypeError("memory content must be a string")
        memory_id = meta.get("id")
        memory_id = validate_memory_id(str(memory_id)) if memory_id is not None else _new_id(kind)
        actor = str(meta.pop("actor", None) or self.actor)
        record = self._new_record(memory_id, kind, content, meta)
        path = memory_path(self.group.path, kind, memory_id, record.created)
        with self.group.lock():
            self.catalog.refresh()
            if path.exists() or self.catalog.locate(memory_id) is not None:
                return memory_id  # idempotent: a retried turn re-writes the same id
            data = render_memory_file(record).encode("utf-8")
            atomic_write_bytes(path, data, durable=self.durable)
            rel = self.group.rel(path)
            self.audit.append(actor=actor, op="write", memory_id=memory_id, path=rel,
                              old_hash=None, new_hash=content_hash(data),
                              turn=meta.get("turn_id"))
            self.catalog.index_written(rel, record, data)
        return memory_id

    def read_sync(self, memory_id: str) -> MemoryRecord:
        validate_memory_id(memory_id)
        self.catalog.refresh()
        return self._load(memory_id)[1]

    def search_sync(self, query: str, *, k: int = 10,
                    filters: dict[str, Any] | None = None) -> list[MemoryRecord]:
        if k <= 0:
            return []
        parsed = SearchFilters.parse(filters)
        self.catalog.refresh()
        if not query.strip():
            rowids = self.catalog.recent(k, parsed)
            recs = self.catalog.records(rowids)
            return [recs[r] for r in rowids if r in recs]
        ranked = self._rank(query, k, parsed)
        recs = self.catalog.records([r for r, _ in ranked])
        return [replace(recs[r], score=s) for r, s in ranked if r in recs]

    def update_sync(self, memory_id: str, new_content: str, *, actor: str | None = None,
                    changes: dict[str, Any] | None = None) -> None:
        """Replace a memory's body (and, for tools, front-matter ``changes``)."""
        validate_memory_id(memory_id)
        with self.group.lock():
            self.catalog.refresh()
            path, record = self._load(memory_id)
            old = read_regular(path)
            fields: dict[str, Any] = {"content": new_content, "updated": now_utc()}
            meta = dict(record.metadata)
            for key, value in (changes or {}).items():
                if key in ("valid_from", "valid_to", "created"):
                    fields[key] = to_datetime(value)
                elif key == "trust":
                    fields[key] = clamp_trust(value)
                elif key == "tags":
                    fields[key] = tuple(value)
                elif key in ("source", "kind"):
                    fields[key] = str(value)
                elif key == "id":
                    raise InvalidMemoryId("the id of a memory cannot change")
                elif value is None:
                    meta.pop(key, None)
                else:
                    meta[key] = value
            fields["metadata"] = meta
            new = replace(record, **fields)
            data = render_memory_file(new).encode("utf-8")
            if data == old:
                return
            atomic_write_bytes(path, data, durable=self.durable)
            rel = self.group.rel(path)
            self.audit.append(actor=actor or self.actor, op="update", memory_id=memory_id,
                              path=rel, old_hash=content_hash(old), new_hash=content_hash(data))
            self.catalog.index_written(rel, new, data)

    def delete_sync(self, memory_id: str, *, actor: str | None = None) -> None:
        validate_memory_id(memory_id)
        with self.group.lock():
            self.catalog.refresh()
            path, _record = self._load(memory_id)
            old = read_regular(path)
            path.unlink()
            if self.durable:
                fsync_dir(path.parent)
            rel = self.group.rel(path)
            self.audit.append(actor=actor or self.actor, op="delete", memory_id=memory_id,
                              path=rel, old_hash=content_hash(old), new_hash=None)
            self.catalog.index_removed(rel)

    def reindex(self, progress: Progress | None = None) -> int:
        """Drop ``.index/`` contents and rebuild from the files; returns records indexed."""
        return self.catalog.rebuild(progress)

    def records(self, filters: dict[str, Any] | None = None) -> list[MemoryRecord]:
        """Every memory passing ``filters`` (default: not superseded), oldest first."""
        self.catalog.refresh()
        return [rec for _, rec in self.catalog.iter_records(SearchFilters.parse(filters))]

    # -- helpers ---------------------------------------------------------------------

    def _rank(self, query: str, k: int, filters: SearchFilters) -> list[tuple[int, float]]:
        raise NotImplementedError

    def _load(self, memory_id: str) -> tuple[Path, MemoryRecord]:
        """The file and freshly parsed record of ``memory_id`` (raises MemoryNotFound)."""
        found = self.catalog.locate(memory_id)
        if found is None:
            raise MemoryNotFound(memory_id)
        rel, _ = found
        path = self.group.path / rel
        try:
            data = read_regular(path)
        except FileNotFoundError:
            raise MemoryNotFound(memory_id) from None
        mtime = datetime.fromtimestamp(path.stat().st_mtime).astimezone()
        name = rel.rsplit("/", 1)[-1]
        record = parse_memory_file(data.decode("utf-8", errors="replace"),
                                   fallback_id=id_from_filename(name),
                                   fallback_kind=found[1].kind, mtime=mtime)
        return path, record

    def _new_record(self, memory_id: str, kind: str, content: str,
                    meta: dict[str, Any]) -> MemoryRecord:
        now = now_utc()
        try:
            created = to_datetime(meta.get("created")) or now
            valid_from = to_datetime(meta.get("valid_from"))
            valid_to = to_datetime(meta.get("valid_to"))
        except ValueError as exc:
            raise ValueError(f"bad date in memory metadata: {exc}") from exc
        trust_raw = meta.get("trust", DEFAULT_TRUST)
        try:
            trust = float(trust_raw)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"trust must be a number in 0..1, got {trust_raw!r}") from exc
        if not 0.0 <= trust <= 1.0:
            raise ValueError(f"trust must be in 0..1, got {trust}")
        extra = {k: v for k, v in meta.items() if k not in CORE_KEYS}
        return MemoryRecord(
            id=memory_id, kind=kind, content=content,
            source=str(meta.get("source") or self.actor), created=created, updated=now,
            trust=trust, valid_from=valid_from, valid_to=valid_to,
            tags=tags_of(meta.get("tags")), metadata=extra,
        )


def _new_id(kind: str) -> str:
    stamp = now_utc().strftime("%Y%m%dT%H%M%S")
    return f"{kind}-{stamp}-{secrets.token_hex(4)}"


"""The ``Memory`` protocol: what every backend (file, vector, hybrid) promises."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class MemoryRecord:
    """One memory: a Markdown file's body plus its front matter."""

    id: str
    kind: str  # "episode", "entity", "procedure", "reflection", "fact", ...
    content: str
    source: str  # channel/chat/message ids, a person, or a tool
    created: datetime
    updated: datetime
    trust: float  # 0..1, from the source, never from the text
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    score: float = 0.0  # set by search


@runtime_checkable
class Memory(Protocol):
    """A group's memory. Opened for exactly one group directory; no method reaches
    another group's files."""

    async def write(self, content: str, *, kind: str, metadata: dict[str, Any]) -> str: ...

    async def read(self, memory_id: str) -> MemoryRecord: ...

    async def search(
        self, query: str, *, k: int = 10, filters: dict[str, Any] | None = None
    ) -> list[MemoryRecord]: ...

    async def update(self, memory_id: str, new_content: str) -> None: ...

    async def delete(self, memory_id: str) -> None: ...

    async def consolidate(self) -> int: ...

    async def reflect(self, context: dict[str, Any]) -> str | None: ...

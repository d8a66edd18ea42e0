"""Search filters: parsed once from the caller's dict, applied in SQL or numpy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory_store.files._fileformat import now_utc, tags_of, to_datetime

KNOWN_KEYS = ("kind", "since", "until", "source", "min_trust", "tags", "include_superseded",
              "now")


@dataclass(frozen=True)
class SearchFilters:
    """What a search may return.

    kind: one kind or several; since/until: bounds on ``created`` (inclusive); source:
    prefix of the record's source (``telegram:-100`` matches ``telegram:-100:msg/7``);
    min_trust: lower bound on trust; tags: every listed tag must be present;
    include_superseded: also return records whose ``valid_to`` lies in the past;
    now: the instant "past" is measured from (default: the call time).
    """

    kinds: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    source: str | None = None
    min_trust: float | None = None
    tags: tuple[str, ...] = ()
    include_superseded: bool = False
    now: datetime | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any] | None) -> SearchFilters:
        """Validate ``raw``; unknown keys and bad values raise ``ValueError`` naming the key."""
        if not raw:
            return cls(now=now_utc())
        unknown = sorted(set(raw) - set(KNOWN_KEYS))
        if unknown:
            raise ValueError(f"unknown search filter(s) {unknown}; known: {list(KNOWN_KEYS)}")
        kind = raw.get("kind")
        kinds: tuple[str, ...]
        if kind is None:
            kinds = ()
        elif isinstance(kind, str):
            kinds = (kind,)
        else:
            kinds = tuple(str(k) for k in kind)
        tags = tags_of(raw.get("tags"))
        min_trust = raw.get("min_trust")
        if min_trust is not None:
            try:
                min_trust = float(min_trust)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"filter min_trust must be a number, got {min_trust!r}") from exc
        source = raw.get("source")
        if source is not None and not isinstance(source, str):
            raise ValueError(f"filter source must be a string, got {source!r}")
        try:
            since = to_datetime(raw.get("since"))
            until = to_datetime(raw.get("until"))
            now = to_datetime(raw.get("now")) or now_utc()
        except ValueError as exc:
            raise ValueError(f"bad time filter: {exc}") from exc
        return cls(kinds=kinds, since=since, until=until, source=source, min_trust=min_trust,
                   tags=tags, include_superseded=bool(raw.get("include_superseded", False)),
                   now=now)

    def sql(self, alias: str = "d") -> tuple[str, list[Any]]:
        """A WHERE fragment (``1`` when nothing to filter) and its parameters.

        The fragment is built from fixed SQL text only; every value is a parameter.
        """
        parts: list[str] = []
        params: list[Any] = []
        if self.kinds:
            parts.append(f"{alias}.kind IN ({','.join('?' * len(self.kinds))})")
            params.extend(self.kinds)
        if self.since is not None:
            parts.append(f"{alias}.created >= ?")
            params.append(self.since.timestamp())
        if self.until is not None:
            parts.append(f"{alias}.created <= ?")
            params.append(self.until.timestamp())
        if self.source:
            # Prefix match without LIKE's wildcards: substr comparison is exact.
            parts.append(f"substr({alias}.source, 1, ?) = ?")
            params.extend([len(self.source), self.source])
        if self.min_trust is not None:
            parts.append(f"{alias}.trust >= ?")
            params.append(self.min_trust)
        for tag in self.tags:
            parts.append(f"EXISTS (SELECT 1 FROM json_each({alias}.tags) WHERE value = ?)")  # noqa: S608
            params.append(tag)
        if not self.include_superseded:
            parts.append(f"({alias}.valid_to IS NULL OR {alias}.valid_to > ?)")
            params.append((self.now or now_utc()).timestamp())
        return (" AND ".join(parts) or "1"), params

    @property
    def only_superseded_check(self) -> bool:
        """True when no filter is active but the superseded exclusion (or its waiver)."""
        return (not self.kinds and self.since is None and self.until is None
                and not self.source and self.min_trust is None and not self.tags)

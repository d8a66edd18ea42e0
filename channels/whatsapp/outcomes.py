"""What became of each reply, and the 24-hour customer-service window per chat.

``DeliveryLog`` is the adapter's delivery-outcome record: for each reply id, the wamid
of every chunk sent, the newest status WhatsApp reported for it (sent, delivered,
read, failed with its error), whether the template went instead, or why nothing was
sent. Statuses find their reply through the tracker (``biz_opaque_callback_data``)
sent with every message, so they match even after a gateway restart. It is bounded
and in memory (``WhatsAppChannel.outcome``/``health``); the shared, durable record is
the gateway's (gateway/outgoing/_delivery.py): a ``failed`` status is reported to it through the
channel's ``OutcomeSink``, and logged.

``ServiceWindow`` keeps, per chat, when the user last wrote (in the channel's
``CursorStore``, so every gateway process and a restart see it): a free-form message
may be sent only within 24 hours of it (Cloud API "customer service windows").
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from channels.base import CursorStore, MemoryCursors
from channels.recent import Recent
from channels.whatsapp.normalize import StatusEvent

__all__ = ["WINDOW_SECONDS", "DeliveryLog", "DeliveryOutcome", "ServiceWindow", "tracker"]

WINDOW_SECONDS = 24 * 3600
#: later statuses outrank earlier ones; they can arrive out of order
_RANK = {"accepted": 0, "sent": 1, "delivered": 2, "read": 3, "failed": 4}


def tracker(reply_id: str, index: int) -> str:
    """The ``biz_opaque_callback_data`` sent with chunk ``index`` of a reply (max 512)."""
    return f"{reply_id}:{index}"[:512]


def _parse_tracker(value: str | None) -> tuple[str, int] | None:
    reply_id, _, index = (value or "").rpartition(":")
    return (reply_id, int(index)) if reply_id and index.isdigit() else None


@dataclass
class DeliveryOutcome:
    """One reply's fate. ``state`` is the summary a caller branches on."""

    reply_id: str
    chat_id: str
    wamids: dict[int, str] = field(default_factory=dict)  # chunk index -> wamid
    statuses: dict[int, str] = field(default_factory=dict)  # chunk index -> newest status
    via_template: str | None = None  # the template's name when it went instead
    not_sent_reason: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """``not_sent`` | ``failed`` | ``read`` | ``delivered`` | ``sent`` | ``accepted``
        (the API took it, no status yet): the worst chunk decides, failed first."""
        if self.not_sent_reason is not None and not self.wamids:
            return "not_sent"
        seen = [self.statuses.get(i, "accepted") for i in self.wamids]
        if "failed" in seen:
            return "failed"
        return min(seen, key=lambda s: _RANK.get(s, 0)) if seen else "accepted"


class DeliveryLog:
    """The newest ``size`` replies' outcomes, plus counters for ``/healthz``."""

    def __init__(self, size: int = 2048) -> None:
        self._replies: Recent[str, DeliveryOutcome] = Recent(size)
        self._by_wamid: Recent[str, tuple[str, int]] = Recent(size * 4)
        self.counts: Counter[str] = Counter()
        self.last_failure: str | None = None

    def _outcome(self, reply_id: str, chat_id: str) -> DeliveryOutcome:
        outcome = self._replies.get(reply_id) or DeliveryOutcome(reply_id, chat_id)
        self._replies[reply_id] = outcome  # now the newest
        return outcome

    def get(self, reply_id: str) -> DeliveryOutcome | None:
        return self._replies.get(reply_id)

    def wamid(self, reply_id: str, index: int) -> str | None:
        outcome = self._replies.get(reply_id)
        return outcome.wamids.get(index) if outcome is not None else None

    def sent(self, reply_id: str, chat_id: str, index: int, wamid: str,
             template: str | None = None) -> None:
        outcome = self._outcome(reply_id, chat_id)
        outcome.wamids[index] = wamid
        if template is not None:
            outcome.via_template = template
        self._by_wamid[wamid] = (reply_id, index)
        self.counts["template" if template else "accepted"] += 1

    def not_sent(self, reply_id: str, chat_id: str, reason: str) -> None:
        self._outcome(reply_id, chat_id).not_sent_reason = reason
        self.counts["not_sent"] += 1
        self.last_failure = f"reply {reply_id}: not sent: {reason}"

    def status(self, event: StatusEvent) -> DeliveryOutcome | None:
        """Record one status against its reply; None when the reply is unknown."""
        self.counts[f"status_{event.status}"] += 1
        where = _parse_tracker(event.tracker) or self._by_wamid.get(event.message_id)
        if where is None:
            return None
        reply_id, index = where
        outcome = self._outcome(reply_id, event.recipient_id)
        outcome.wamids.setdefault(index, event.message_id)
        old = outcome.statuses.get(index)
        if old is None or _RANK.get(event.status, 0) >= _RANK.get(old, 0):
            outcome.statuses[index] = event.status
        if event.status == "failed":
            outcome.errors.extend(event.errors)
            self.last_failure = f"reply {reply_id} chunk {index}: " + "; ".join(event.errors)
        return outcome

    def snapshot(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "last_failure": self.last_failure}


class ServiceWindow:
    """When each chat's user last wrote, shared through the ``CursorStore``."""

    def __init__(self) -> None:
        self._store: CursorStore = MemoryCursors()  # until the gateway binds its store

    def bind(self, store: CursorStore) -> None:
        self._store = store

    async def last(self, chat_id: str) -> int | None:
        value = await self._store.get(f"window:{chat_id}")
        return int(value) if value is not None and value.isdigit() else None

    async def opened(self, chat_id: str, at: int) -> None:
        """The user wrote at ``at`` (Unix seconds); later writes never move it back."""
        last = await self.last(chat_id)
        if last is None or last < at:
            await self._store.set(f"window:{chat_id}", str(at))

    async def is_open(self, chat_id: str) -> bool:
        last = await self.last(chat_id)
        return last is not None and time.time() - last < WINDOW_SECONDS

"""What a webhook platform (Slack's Events API, Meta's WhatsApp webhooks) does with the
adapter's answers, for the contract harnesses: remember each delivery's HTTP status and
POST again whatever was answered with a 5xx."""

from __future__ import annotations

from collections.abc import Awaitable, Callable


class Redelivery:
    """``post(fixture)`` delivers one fixture and returns the HTTP status."""

    def __init__(self, post: Callable[[str], Awaitable[int]]) -> None:
        self._post = post
        self.answered: dict[str, int] = {}
        self.pending: list[str] = []

    async def deliver(self, fixture: str) -> None:
        status = await self._post(fixture)
        self.answered[fixture] = status
        if status >= 500:
            self.pending.append(fixture)

    async def redeliver_pending(self) -> None:
        pending, self.pending = self.pending, []
        for fixture in pending:
            await self.deliver(fixture)

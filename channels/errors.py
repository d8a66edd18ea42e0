"""One exception tree for every channel, and so one retry policy.

``TransientError`` means "try again later" (the outbox retries with backoff, or waits
``retry_after`` when the platform said so). ``PermanentError`` means "a retry will not
help": the outbox logs it once with its reason and drops the chunk.

A transient failure of a send is either safe or ambiguous. Safe: the request never
left (connect refused, DNS, a pool or connect timeout), so a retry cannot duplicate.
``MaybeSent``: it may have reached the platform (read timeout, connection dropped after
the request was written, a 5xx after the body was sent); the outbox counts it, logs it
once with the reply id and resolves it per platform (``Channel.find_sent``; a platform
idempotency key such as Discord's nonce or Matrix's transaction id; else a re-send,
at least once rather than lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

E = TypeVar("E", bound=BaseException)


class ChannelError(Exception):
    """Base of every error a channel raises."""


class TransientError(ChannelError):
    """Network trouble, timeouts, 5xx, rate limits: retrying may succeed."""


class NetworkError(TransientError):
    """The platform could not be reached or timed out."""


class MaybeSent(TransientError):
    """The send may have reached the platform before it failed: retrying may duplicate
    it unless the platform dedupes or the message can be looked up."""


class RateLimited(TransientError):
    """The platform said 429; ``retry_after`` is what it asked us to wait, in seconds."""

    def __init__(self, retry_after: float, message: str = "rate limited") -> None:
        super().__init__(f"{message} (retry after {retry_after:.1f}s)")
        self.retry_after = retry_after


class PermanentError(ChannelError):
    """Auth failure, bot blocked or removed, chat gone, message too large."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason = reason


def retry_after_header(headers: Mapping[str, Any] | None, default: float) -> float:
    """A 429's ``Retry-After`` header in seconds (never below 0), or ``default`` when
    it is absent or not a number. The lower-case spelling covers SDKs that hand the
    headers over as a plain dict."""
    raw = None if headers is None else headers.get("Retry-After", headers.get("retry-after"))
    try:
        return max(float(raw), 0.0) if raw is not None else default
    except (TypeError, ValueError):
        return default


@contextmanager
def mapped(errors: type[E] | tuple[type[E], ...], translate: Callable[[E], ChannelError]
           ) -> Iterator[None]:
    """Raise ``translate(error)`` for any of ``errors`` raised inside (an SDK's own
    exceptions onto this tree), the original not chained: its text may carry a token."""
    try:
        yield
    except errors as error:
        raise translate(error) from None


class FormattingRejected(ChannelError):
    """The platform refused the formatted text; resend the chunk as plain text."""


class AttachmentTooLarge(PermanentError):
    """An attachment is bigger than the cap it was fetched with; the adapter stopped
    reading at the cap (``Channel.fetch_attachment``)."""

    def __init__(self, limit: int, message: str = "") -> None:
        super().__init__("attachment too large", message or f"over {limit} bytes")
        self.limit = limit

    @classmethod
    def check(cls, size: int | None, limit: int) -> None:
        """Raise it when ``size`` bytes (None: not known yet) are over ``limit``."""
        if size is not None and size > limit:
            raise cls(limit)

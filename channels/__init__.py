"""Chat platforms: the normalized message envelope and one adapter per platform.

Adapters translate; they never route, remember or call a model.
"""

from __future__ import annotations

from channels.base import Channel, ChannelLimits, CursorStore, InboundSink
from channels.errors import (
    ChannelError,
    FormattingRejected,
    NetworkError,
    PermanentError,
    RateLimited,
    TransientError,
)
from channels.models import Attachment, Inbound, Outbound, group_key

__all__ = [
    "Attachment",
    "Channel",
    "ChannelError",
    "ChannelLimits",
    "CursorStore",
    "FormattingRejected",
    "Inbound",
    "InboundSink",
    "NetworkError",
    "Outbound",
    "PermanentError",
    "RateLimited",
    "TransientError",
    "group_key",
]

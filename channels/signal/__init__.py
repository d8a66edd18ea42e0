"""Signal adapter: a ``signal-cli daemon --http`` in (server-sent events) and out
(JSON-RPC ``send`` with quotes and text styles)."""

from __future__ import annotations

from channels.signal.channel import SIGNAL_LIMITS, SignalChannel
from channels.signal.settings import SignalSettings

__all__ = ["SIGNAL_LIMITS", "SignalChannel", "SignalSettings"]

"""Email adapter: a mailbox read over IMAP (IDLE or polling), replies sent over SMTP."""

from __future__ import annotations

from channels.email.channel import EMAIL_LIMITS, EmailChannel
from channels.email.settings import EmailSettings

__all__ = ["EMAIL_LIMITS", "EmailChannel", "EmailSettings"]

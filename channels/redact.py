"""The one secret redactor: keeps tokens and keys out of logs, errors and memory.

``redact(text, *secrets)`` replaces each secret (and, for a long one, the prefix and
suffix a provider may echo, like ``sk-ab...wxyz``) with ``***``. ``SecretRedactor`` is
the same as a logging filter. It is pure (no SDK): the adapters and the workers (for the
model key) both use it.

A Telegram token is part of every Bot API URL, and both python-telegram-bot
(``telegram.Bot`` logs its base URL at DEBUG) and httpx (``HTTP Request: POST <url>`` at
INFO) log URLs. Logger filters run only for records created on that very logger, so the
filter is attached to each logger known to log URLs, before the Bot is built.
"""

from __future__ import annotations

import logging

#: loggers that log request URLs (and so the token)
URL_LOGGERS = (
    "telegram.Bot",
    "telegram.BaseRequest",
    "telegram.HTTPXRequest",
    "telegram.ext.Updater",
    "httpx",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.connection",
    "httpcore.proxy",
)


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every occurrence of each secret, and of a long secret's first 12 and
    last 8 characters, replaced by ``***``."""
    for secret in secrets:
        if not secret:
            continue
        text = text.replace(secret, "***")
        if len(secret) >= 16:
            for piece in (secret[:12], secret[-8:]):
                text = text.replace(piece, "***")
    return text


class SecretRedactor(logging.Filter):
    """Replaces any registered secret in a record's message with ``***``."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()

    def add(self, secret: str) -> None:
        if secret:
            self._secrets.add(secret)

    def redact(self, text: str) -> str:
        return redact(text, *self._secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        # no early return without secrets: a subclass's ``redact`` may mask more
        # (channels.email.redact: IMAP auth arguments)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        cleaned = self.redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_text is None:
            formatted = logging.Formatter().formatException(record.exc_info)
            if any(secret in formatted for secret in self._secrets):
                record.exc_text, record.exc_info = self.redact(formatted), None
        return True


REDACTOR = SecretRedactor()


def protect(secret: str) -> None:
    """Redact ``secret`` from every URL-logging logger (``URL_LOGGERS``) from now on."""
    REDACTOR.add(secret)
    for name in URL_LOGGERS:
        logger = logging.getLogger(name)
        if REDACTOR not in logger.filters:
            logger.addFilter(REDACTOR)

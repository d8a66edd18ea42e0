"""Keep bot tokens out of log output.

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


class SecretRedactor(logging.Filter):
    """Replaces any registered secret in a record's message with ``***``."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()

    def add(self, secret: str) -> None:
        if secret:
            self._secrets.add(secret)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
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
    """Redact ``secret`` from every URL-logging logger from now on."""
    REDACTOR.add(secret)
    for name in URL_LOGGERS:
        logger = logging.getLogger(name)
        if REDACTOR not in logger.filters:
            logger.addFilter(REDACTOR)

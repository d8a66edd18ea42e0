"""Keep credentials out of aioimaplib's debug log.

aioimaplib logs every line it sends at DEBUG. It masks a LOGIN password only when the
password is sent verbatim (a quoted one with escapes slips through) and masks the raw
token of AUTHENTICATE XOAUTH2, but not the base64 SASL string that carries it. This
filter rewrites both commands' arguments and any registered secret before a record
is emitted. (aiosmtplib does not log.)
"""

from __future__ import annotations

import logging
import re

IMAP_LOGGER = "aioimaplib.aioimaplib"
#: "<tag> LOGIN <user> <password>" and "<tag> AUTHENTICATE <mechanism> <initial response>"
_AUTH = re.compile(
    r"(\b[A-Za-z]+\d+\s+(?:LOGIN|AUTHENTICATE)\s+\S+\s+)(\"(?:[^\"\\]|\\.)*\"|\S+)",
    re.IGNORECASE,
)


class _Redactor(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def redact(self, text: str) -> str:
        text = _AUTH.sub(lambda m: m.group(1) + "***", text)
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        cleaned = self.redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


REDACTOR = _Redactor()


def protect(*secrets: str) -> None:
    """Mask ``secrets`` (and IMAP auth arguments) in aioimaplib's log from now on."""
    REDACTOR.secrets.update(s for s in secrets if s)
    logger = logging.getLogger(IMAP_LOGGER)
    if REDACTOR not in logger.filters:
        logger.addFilter(REDACTOR)

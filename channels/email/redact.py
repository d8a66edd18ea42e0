"""Keep credentials out of aioimaplib's debug log: the one redactor
(``channels.redact.SecretRedactor``) plus what only IMAP needs.

aioimaplib logs every line it sends at DEBUG. It masks a LOGIN password only when the
password is sent verbatim (a quoted one with escapes slips through) and masks the raw
token of AUTHENTICATE XOAUTH2, but not the base64 SASL string that carries it. That
string is no registered secret (it is built per login), so the arguments of both
commands are masked by pattern, then every registered secret as everywhere else.
(aiosmtplib does not log.)
"""

from __future__ import annotations

import logging
import re

from channels.redact import SecretRedactor

IMAP_LOGGER = "aioimaplib.aioimaplib"
#: "<tag> LOGIN <user> <password>" and "<tag> AUTHENTICATE <mechanism> <initial response>"
_AUTH = re.compile(
    r"(\b[A-Za-z]+\d+\s+(?:LOGIN|AUTHENTICATE)\s+\S+\s+)(\"(?:[^\"\\]|\\.)*\"|\S+)",
    re.IGNORECASE,
)


class ImapRedactor(SecretRedactor):
    """``SecretRedactor`` that also masks the arguments of IMAP's auth commands."""

    def redact(self, text: str) -> str:
        return super().redact(_AUTH.sub(lambda m: m.group(1) + "***", text))


REDACTOR = ImapRedactor()


def protect(*secrets: str) -> None:
    """Mask ``secrets`` (and IMAP auth arguments) in aioimaplib's log from now on."""
    for secret in secrets:
        REDACTOR.add(secret)
    logger = logging.getLogger(IMAP_LOGGER)
    if REDACTOR not in logger.filters:
        logger.addFilter(REDACTOR)

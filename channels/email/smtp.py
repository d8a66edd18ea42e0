"""Sending one mail with aiosmtplib, and SMTP replies mapped onto ``channels.errors``.

SMTP has no 429 and no Retry-After: a server that wants us to slow down answers 421 or
a 4.7.x enhanced status (RFC 3463: "security or policy status"), sometimes naming a
delay in its text ("try again in 7 seconds"). Those are ``RateLimited`` (with the named
delay, else ``throttle_wait``); other 4xx answers and dropped connections are
transient; 5xx answers are permanent (552/5.3.4: too large).
"""

from __future__ import annotations

import re
import socket
import ssl
from email.message import EmailMessage

import aiosmtplib

from channels.email.imap import TokenSource
from channels.email.settings import EmailSettings
from channels.errors import ChannelError, MaybeSent, NetworkError, PermanentError, RateLimited

_DELAY = re.compile(r"(\d+(?:\.\d+)?)\s*(s\b|sec|second|min)", re.IGNORECASE)
_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})")


def _named_delay(text: str) -> float | None:
    found = _DELAY.search(text)
    if not found:
        return None
    value = float(found.group(1))
    return value * 60 if found.group(2).lower().startswith("min") else value


def map_smtp_error(err: Exception, throttle_wait: float) -> ChannelError:
    """The channel error for an aiosmtplib exception (text never includes secrets:
    servers do not echo credentials, and aiosmtplib's messages carry none)."""
    if isinstance(err, aiosmtplib.SMTPAuthenticationError):
        return PermanentError("auth_failed", f"smtp login refused ({err.code})")
    if isinstance(err, aiosmtplib.SMTPRecipientsRefused):
        codes = sorted({r.code for r in err.recipients})
        if all(c >= 500 for c in codes):
            return PermanentError("recipient_refused", f"smtp refused every recipient {codes}")
        return NetworkError(f"smtp: recipients deferred {codes}")
    if isinstance(err, aiosmtplib.SMTPResponseException):
        code, text = err.code, str(err.message)
        enhanced = _ENHANCED.match(text)
        policy = enhanced is not None and enhanced.group(2) == "7"
        if code == 421 or (400 <= code < 500 and policy):
            wait = _named_delay(text) or throttle_wait
            return RateLimited(wait, f"smtp {code} {text[:120]}")
        if 400 <= code < 500:
            return NetworkError(f"smtp {code}: {text[:160]}")
        if code == 552 or (enhanced is not None and enhanced.group(0).strip() == "5.3.4"):
            return PermanentError("too_large", f"smtp {code}: {text[:160]}")
        return PermanentError("rejected", f"smtp {code}: {text[:160]}")
    if isinstance(err, aiosmtplib.SMTPConnectError | ConnectionRefusedError | socket.gaierror):
        return NetworkError(f"smtp: {type(err).__name__}")  # never connected: nothing sent
    if isinstance(err, aiosmtplib.SMTPServerDisconnected | aiosmtplib.SMTPReadTimeoutError
                  | ConnectionResetError):
        # the message may have been accepted before the connection went: the outbox
        # looks for the bot's own copy (``Outgoing.find_sent``) before sending again
        return MaybeSent(f"smtp: {type(err).__name__}")
    if isinstance(err, (aiosmtplib.SMTPException, OSError, TimeoutError)):
        return NetworkError(f"smtp: {type(err).__name__}")
    return NetworkError(f"smtp: unexpected {type(err).__name__}")


async def send_mail(
    mail: EmailMessage,
    settings: EmailSettings,
    recipients: list[str],
    *,
    password: str | None = None,
    token: TokenSource | None = None,
) -> list[str]:
    """Submit ``mail`` to the configured SMTP server for ``recipients`` (the envelope,
    which may name more than the headers); return the recipients the server refused
    while it accepted others. Raise a ``ChannelError``."""
    tls = settings.smtp_security
    try:
        refused, _ = await aiosmtplib.send(
            mail,
            sender=settings.address,
            recipients=recipients,
            hostname=settings.smtp_host,
            port=settings.smtp_port_resolved,
            username=settings.login,
            password=password if token is None else None,
            oauth_token_generator=token,
            use_tls=tls == "tls",
            start_tls=tls == "starttls",
            tls_context=ssl.create_default_context() if tls != "none" else None,
            timeout=settings.timeout,
        )
    except Exception as err:
        raise map_smtp_error(err, settings.throttle_wait) from None
    return sorted(refused)

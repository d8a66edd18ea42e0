"""The one secret redactor: keeps tokens and keys out of logs, errors and memory.

``redact(text, *secrets)`` replaces each secret (and, for a long one, the prefix and
suffix a provider may echo, like ``sk-ab...wxyz``) with ``***``. ``SecretRedactor`` is
the same as a logging filter. It is pure (no SDK): the adapters and the workers (for the
model key) both use it.

A Telegram token is part of every Bot API URL, and both python-telegram-bot
(``telegram.Bot`` logs its base URL at DEBUG) and httpx (``HTTP Request: POST <url>`` at
INFO) log URLs. Logger filters run only for records created on that very logger, so the
filter is attached to each logger known to log URLs, before the Bot is built.

Message text is the other thing logs must not carry. Our own code logs ids, never text;
the platform libraries do not hold to that (slack-bolt logs the whole body of a request
whose signature fails at INFO, and of an unhandled one at WARNING; aiohttp's access log
has every URL). ``LibraryTextGuard`` is the process's log record factory (``guard_logs``,
called where logging is configured), so it sees every record of every library logger
named in ``LIBRARY_LOGGERS`` and of its children, whatever handler comes later: their
text is withheld from INFO up (the template stays, its text arguments and the
exception's message go) and INFO records are lowered to DEBUG, so they are not shown.
``--log-level debug`` shows them in full: the operator asked for it.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

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


#: Loggers of the libraries that can log a message's text (request and response bodies,
#: updates, events, IMAP lines, URLs), and of ours that Bolt logs through (its
#: ``logger=`` and the loggers it derives from it, named ``<app name>:<listener>``; the
#: app is named ``pynanoclaw-slack-<account>``, so that entry, ending in ``-``, is a
#: prefix). A child logger (``.``, Bolt's ``:``) is covered by its parent's entry.
LIBRARY_LOGGERS = (
    "slack_bolt",
    "slack_sdk",
    "channels.slack.bolt",
    "channels.slack.sdk",
    "pynanoclaw-slack-",
    "telegram",
    "discord",
    "nio",
    "aiohttp",
    "pywa",
    "aioimaplib",
    "aiosmtplib",
    "httpx",
    "httpcore",
    "websockets",
    "llama_cpp",
)
WITHHELD = "[withheld]"
#: argument types that cannot carry text
_PLAIN = (int, float, bool, type(None))


def is_library(name: str) -> bool:
    """Whether a record of logger ``name`` comes from a library in ``LIBRARY_LOGGERS``
    (the logger itself or a child: ``.`` or Bolt's ``:``)."""
    return any(name.startswith(p) if p.endswith("-") else
               name == p or name.startswith((p + ".", p + ":")) for p in LIBRARY_LOGGERS)


def _withhold_args(args: Any) -> Any:
    if isinstance(args, dict):
        return {k: v if isinstance(v, _PLAIN) else WITHHELD for k, v in args.items()}
    return tuple(a if isinstance(a, _PLAIN) else WITHHELD for a in args)


def _frames_only(exc_info: Any) -> str:
    """A traceback with each exception's type and frames, never its message (an
    exception of a library can quote the payload it failed on)."""
    lines: list[str] = []
    for part in traceback.TracebackException(*exc_info).format():
        if part.startswith(("Traceback", "  ", "\n", "During handling", "The above")):
            lines.append(part)
        else:  # "module.Type: message" (or a note): only the type stays
            name = part.split(":", 1)[0].strip()
            known = name.replace(".", "").replace("_", "").isalnum()
            lines.append(f"{name if known else 'exception'}: {WITHHELD}\n")
    return "".join(lines).rstrip("\n")


class LibraryTextGuard:
    """A log record factory (``logging.setLogRecordFactory``) wrapping the one before:
    a library's record at INFO or above is made without its text (the template stays,
    its text arguments and its exception's message go), and one below WARNING is also
    lowered to DEBUG, where the operator's handlers (at the configured level) drop it.
    As a factory it runs where each record is made, before any handler or filter sees
    it, for every logger, children included. ``debug``: records are left as they are."""

    def __init__(self, make: Callable[..., logging.LogRecord], debug: bool = False) -> None:
        self.make = make
        self.debug = debug

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.make(*args, **kwargs)
        if self.debug or record.levelno < logging.INFO or not is_library(record.name):
            return record
        if record.levelno < logging.WARNING:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        if isinstance(record.msg, str) and record.args:
            record.args = _withhold_args(record.args)
        else:  # built before the call (an f-string, a dict): nothing to tell apart
            size = len(str(record.msg))
            record.msg, record.args = f"{WITHHELD} ({size} characters)", None
        if record.exc_info:
            record.exc_text, record.exc_info = _frames_only(record.exc_info), None
        record.stack_info = None
        return record


def guard_library_records(debug: bool = False) -> LibraryTextGuard:
    """Make ``LibraryTextGuard`` the record factory (replacing an earlier guard, never
    stacking on it); returns it (``.make`` is the factory it wraps)."""
    current = logging.getLogRecordFactory()
    if isinstance(current, LibraryTextGuard):
        current = current.make
    guard = LibraryTextGuard(current, debug)
    logging.setLogRecordFactory(guard)
    return guard


def guard_logs(level: int | str) -> None:
    """``guard_library_records`` for the configured ``level``, and every handler of the
    root logger set to it (call it after ``logging.basicConfig``, whose handler passes
    every level), so a library record lowered to DEBUG is not shown. At DEBUG nothing
    is withheld: the operator asked for everything."""
    resolved = logging.getLevelName(level) if isinstance(level, str) else level
    if not isinstance(resolved, int):
        raise ValueError(f"unknown log level {level!r}")
    guard_library_records(debug=resolved <= logging.DEBUG)
    for handler in logging.getLogger().handlers:
        handler.setLevel(resolved)


def setup_logging(level: str) -> None:
    """The logging of every process of the project (``pynanoclaw ...``, ``python -m
    workers``): records to stderr at ``level``, with no message text from the libraries
    (``guard_logs``)."""
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    guard_logs(level.upper())

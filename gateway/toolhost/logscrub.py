"""Secrets out of every log record of the tool host, whoever logs it.

The MCP SDK logs whole protocol messages at DEBUG (``mcp.client.streamable_http``: "SSE
message: ..."), so a server that echoes its token would put it in the host's log; so
could an exception's text. A logger filter only sees records of its own logger, so this
is a log record factory: it scrubs each record, of every logger, where it is made,
before any handler (``channels.redact.SecretRedactor`` does the scrubbing). Installed
once per process; later calls only add secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from channels.redact import SecretRedactor


class ScrubbingFactory:
    """A log record factory wrapping the one before; scrubs ``redactor``'s secrets."""

    def __init__(self, make: Callable[..., logging.LogRecord]) -> None:
        self.make = make
        self.redactor = SecretRedactor()

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.make(*args, **kwargs)
        self.redactor.filter(record)
        return record


def scrub_logs(secrets: Iterable[str]) -> None:
    """From now on, no log record of this process carries any of ``secrets``."""
    current = logging.getLogRecordFactory()
    if not isinstance(current, ScrubbingFactory):
        current = ScrubbingFactory(current)
        logging.setLogRecordFactory(current)
    for secret in secrets:
        current.redactor.add(secret)

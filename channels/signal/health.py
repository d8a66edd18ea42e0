"""What the Signal adapter tells ``/healthz`` and the operator's log.

Every condition is logged once when it begins and once when it ends, never once per
failed attempt: a daemon that is down for an hour gives two log lines, not hundreds.

``state`` is the most pressing condition: an operator problem (``captcha_required``,
``rate_limited``, ``untrusted_identity``) first, then the events stream
(``disconnected`` or ``ok``). ``gaps`` counts breaks in the events stream during which
signal-cli may have received and dropped messages (see ``SignalSettings.receive_mode``);
``last_gap`` is the latest such window.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from channels.signal.errors import Problem

log = logging.getLogger("channels.signal")


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


class SignalHealth:
    """Mutable status of one Signal account, read by ``SignalChannel.health``."""

    def __init__(self, account: str) -> None:
        self._account = account
        self.connected = False
        self.stream_since = _now()
        self.stream_detail = "not connected yet"
        self._down_logged = False
        self.problem: Problem | None = None
        self.problem_since: datetime | None = None
        self.gaps = 0
        self.last_gap: dict[str, Any] | None = None

    def stream_up(self) -> None:
        if self._down_logged:
            log.info("signal (%s): events stream connected again", self._account)
            self._down_logged = False
        if not self.connected:
            self.connected, self.stream_since, self.stream_detail = True, _now(), "connected"

    def stream_down(self, reason: str) -> None:
        if self.connected:
            self.stream_since = _now()
        if not self._down_logged:
            log.warning("signal (%s): events stream down (%s); reconnecting",
                        self._account, reason)
            self._down_logged = True
        self.connected, self.stream_detail = False, reason

    def gap(self, start: datetime, end: datetime, reason: str) -> None:
        """Record a window in which signal-cli may have dropped messages for us."""
        self.gaps += 1
        self.last_gap = {"from": _iso(start), "to": _iso(end), "reason": reason}
        log.warning(
            "signal (%s): messages received by signal-cli between %s and %s may be lost "
            "(%s); signal-cli keeps no backlog for a client that was not listening",
            self._account, _iso(start), _iso(end), reason,
        )

    def report(self, problem: Problem) -> None:
        """An operator problem: logged when it starts or changes, not on every repeat."""
        if self.problem is None or self.problem.state != problem.state:
            log.error("signal (%s): %s: %s", self._account, problem.state, problem.advice)
            self.problem_since = _now()
        self.problem = problem

    def sent_ok(self) -> None:
        if self.problem is not None:
            log.info("signal (%s): %s cleared, sending works again",
                     self._account, self.problem.state)
        self.problem, self.problem_since = None, None

    def snapshot(self) -> dict[str, Any]:
        stream = "connected" if self.connected else "disconnected"
        out: dict[str, Any] = {
            "state": self.problem.state if self.problem else ("ok" if self.connected else stream),
            "stream": stream,
            "stream_since": _iso(self.stream_since),
            "gaps": self.gaps,
            "last_gap": self.last_gap,
        }
        if not self.connected:
            out["stream_detail"] = self.stream_detail
        if self.problem is not None and self.problem_since is not None:
            out["detail"] = self.problem.advice
            out["since"] = _iso(self.problem_since)
        return out

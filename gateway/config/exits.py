"""Exit statuses: of a worker process (read by ``pynanoclaw run``'s supervisor), and of
every command (``pynanoclaw ...``, ``python -m workers.smoke``).

Distinct so that a Redis that is down for a moment (the embedded server restarting) or a
model that is not installed is never read as a configuration the worker rejected: only
``CONFIG`` stops the run; the others are restarted with backoff and reported.
"""

from __future__ import annotations

from enum import IntEnum


class WorkerExit(IntEnum):
    CONFIG = 2  #: the configuration is wrong (the worker printed the key and the fix)
    REDIS = 3  #: Redis could not be reached
    MODEL = 4  #: the model is missing or cannot load

    @classmethod
    def describe(cls, code: int) -> str:
        """What a worker's exit status means, with the signal's name for a signal."""
        import signal

        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        meanings: dict[int, str] = {cls.CONFIG: "rejected the configuration",
                                    cls.REDIS: "could not reach Redis",
                                    cls.MODEL: "could not load the model"}
        return meanings.get(code, f"exited with status {code}")


class CommandExit(IntEnum):
    """What a command's exit status says (0: done)."""

    FAILED = 1  #: it ran, but what it was asked did not happen (a check failed, no such code)
    USAGE = 2  #: a wrong argument, a broken config or an unreachable Redis (one error line)
    #: ``status`` only: no check failed, but one warned: every chat is answered, some
    #: messages less well (voice notes untranscribed). Not 1, so a monitor that reads 1 as
    #: "the bot is down" still can; not 0, so a monitor that reads any other as a problem
    #: still sees it
    DEGRADED = 3

"""Starting one channel without letting it take the others down.

A channel whose start fails with anything but ``PermanentError`` (the network, a platform
5xx, a timeout) is retried in the background with the adapters' one backoff policy
(``channels.retry.retrying``, jittered exponential, capped), while the rest of the
gateway runs. A ``PermanentError`` (a refused token) or a ``ValueError`` (a setting the start found
wrong, e.g. a missing app token) is not retried: the channel is ``failed`` with one line
naming the environment variables that hold its credentials.
``health()`` is what ``/healthz`` shows under ``channel_status``: ``start`` is
``running``, ``retrying`` (with ``error``, the last one) or ``failed`` (with ``error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from channels.base import Channel, InboundSink
from channels.errors import PermanentError
from channels.retry import retrying

log = logging.getLogger(__name__)

#: first and longest wait between start attempts, seconds
START_BACKOFF_FIRST = 1.0
START_BACKOFF_MAX = 60.0


def credential_envs(channel: Channel) -> list[str]:
    """The environment variables holding a channel's credentials, read from its
    settings model (fields named ``*token_env``, ``*key_env``, ``*secret_env``,
    ``*password_env``), so a refused one can be named without adapter code."""
    settings = getattr(channel, "settings", None)
    fields: dict[str, Any] = getattr(type(settings), "model_fields", {}) if settings else {}
    names = [str(getattr(settings, f)) for f in fields
             if f.endswith("_env") and any(w in f for w in ("token", "key", "secret",
                                                            "password"))]
    return [n for n in names if n]


def one_line(err: BaseException) -> str:
    """The error as one line (adapters' messages never hold the secret itself)."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


class ChannelStarter:
    """Starts ``channel`` with ``sink``: once now, then in the background until it works
    (or fails for good)."""

    def __init__(self, channel: Channel, sink: InboundSink, *,
                 initial: float = START_BACKOFF_FIRST,
                 maximum: float = START_BACKOFF_MAX,
                 on_started: Callable[[Channel], Awaitable[None]] | None = None) -> None:
        self.channel = channel
        self._sink = sink
        self._on_started = on_started
        self._initial = initial
        self._maximum = maximum
        self.state = "starting"
        self.error: str | None = None
        self.attempts = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def label(self) -> str:
        return f"{self.channel.name}:{self.channel.account}"

    async def start(self) -> bool:
        """One attempt now; on a transient failure keep trying in the background.
        Returns True if the channel runs."""
        try:
            await self._attempt()
        except (PermanentError, ValueError) as err:  # refused, or configured wrong
            self._failed(err)
            return False
        except Exception as err:  # any start failure of one channel stays in it
            self._retrying(err, self._initial)
            self._task = asyncio.get_running_loop().create_task(
                self._retry(), name=f"start {self.label}")
            return False
        return True

    async def _attempt(self) -> None:
        self.attempts += 1
        try:
            await self.channel.start(self._sink)
        except BaseException:
            # whatever the failed start opened (a session, a socket) is closed before
            # the next attempt
            with contextlib.suppress(Exception):
                await self.channel.stop()
            raise
        self.state, self.error = "running", None
        log.info("channel %s started", self.label)
        if self._on_started is not None:
            await self._on_started(self.channel)

    async def _retry(self) -> None:
        policy = retrying(initial=self._initial, maximum=self._maximum,
                          retry_if=lambda exc: not isinstance(exc, PermanentError
                                                              | ValueError),
                          on_retry=self._retrying)
        try:
            async for attempt in policy:
                with attempt:
                    await self._attempt()
        except Exception as err:
            # refused or misconfigured; anything else is a bug (the policy never gives up)
            self._failed(err)

    def _retrying(self, err: BaseException, delay: float) -> None:
        first = self.state != "retrying"
        self.state, self.error = "retrying", one_line(err)
        (log.warning if first else log.info)(
            "channel %s could not start (%s); retrying in %.0fs, the other channels run",
            self.label, self.error, delay)

    def _failed(self, err: BaseException) -> None:
        envs = credential_envs(self.channel)
        hint = f"; check {' / '.join(envs)}" if envs else ""
        self.state, self.error = "failed", f"{one_line(err)}{hint}"
        log.error("channel %s failed: %s (not retried; the other channels run)",
                  self.label, self.error)

    def health(self) -> dict[str, Any]:
        if self.state == "running":
            return {"start": "running", **self.channel.health()}
        return {"start": self.state, "error": self.error, "attempts": self.attempts}

    async def stop(self) -> None:
        """Stop retrying; stop the channel if it runs."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.state == "running":
            self.state = "stopped"
            await self.channel.stop()

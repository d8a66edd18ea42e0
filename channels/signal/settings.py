"""The ``[channels.signal]`` config block."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from channels.retry import BackoffSettings

_E164 = re.compile(r"^\+[1-9][0-9]{4,14}$")


class SignalSettings(BackoffSettings):
    """Validated config of one Signal account served by a running ``signal-cli daemon``.

    signal-cli's HTTP endpoint has no authentication of its own; ``auth_env`` optionally
    names an environment variable holding an ``Authorization`` header value for a
    reverse proxy in front of it (the value itself is never in the block).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the account's phone number (E.164): selects the account in signal-cli's
    #: multi-account mode and identifies "the bot" in mentions
    number: str
    #: the account's ACI (uuid), also matched in mentions (signal-cli lists both when
    #: it knows them); optional
    uuid: str | None = None
    #: root of ``signal-cli daemon --http HOST:PORT``
    url: str = "http://127.0.0.1:8080"
    #: must match the daemon's ``--receive-mode``. With ``on-start`` (signal-cli's
    #: default) the daemon receives and acknowledges messages even while no client
    #: listens, so every break in the events stream may have lost messages: the adapter
    #: reports each break as a gap. ``on-connection`` leaves them on the Signal server
    #: until a client listens again: a break loses nothing and is not a gap.
    receive_mode: Literal["on-start", "on-connection"] = "on-start"
    auth_env: str | None = None
    #: seconds without a byte on the events stream (signal-cli sends a keep-alive
    #: comment every 15 s) before the connection is declared dead and reopened
    idle_timeout: float = Field(default=60.0, gt=0)
    #: seconds one JSON-RPC call may take (a send to a large group is slow)
    request_timeout: float = Field(default=60.0, gt=0)
    #: the reconnect and sink-retry backoff's longest wait, seconds
    backoff_max: float = Field(default=30.0, gt=0)
    #: how long ``start`` waits for the events stream before returning anyway (the
    #: stream keeps reconnecting in the background), seconds
    connect_wait: float = Field(default=10.0, ge=0)

    @field_validator("number")
    @classmethod
    def _e164(cls, value: str) -> str:
        if not _E164.match(value):
            raise ValueError(f"{value!r} is not a phone number in E.164 form such as +15551234567")
        return value

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https:// (signal-cli daemon --http)")
        return value.rstrip("/")

"""The ``[channels.matrix]`` config block."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from channels.retry import BackoffSettings


class MatrixSettings(BackoffSettings):
    """Validated config of one Matrix bot account.

    Secrets are never in the block: ``access_token_env`` and ``password_env`` name the
    environment variables that hold them (one of the two must be set).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: client-server API base URL, e.g. "https://matrix.example.org"
    homeserver: str
    #: the bot's full user id, e.g. "@claw:example.org"
    user_id: str
    access_token_env: str = "MATRIX_ACCESS_TOKEN"  # noqa: S105 (a variable name, not a secret)
    password_env: str = "MATRIX_PASSWORD"  # noqa: S105 (a variable name, not a secret)
    #: device name shown in the bot's session list when it logs in with a password
    device_name: str = "PyNanoClaw"
    #: where the session (device id, access token) and the E2E key store live;
    #: default: ``<data_dir>/matrix/<account>``
    store_dir: Path | None = None
    #: end-to-end encrypted rooms (needs matrix-nio's e2e extra); off: they are
    #: reported once and skipped
    encryption: bool = True
    #: invites: "open" joins every invite, "allowlist" only from ``invite_allow``
    #: (user ids "@ann:example.org", servers ":example.org", or room ids), "off" none
    auto_join: Literal["open", "allowlist", "off"] = "allowlist"
    invite_allow: list[str] = Field(default_factory=list)
    #: msgtype of the bot's replies; bots conventionally may use "m.notice"
    reply_msgtype: Literal["m.text", "m.notice"] = "m.text"
    #: a plain-text mention of the bot's display name engages it (when the sender's
    #: client did not send ``m.mentions``)
    display_name_mentions: bool = True

    # --- sync
    #: long-poll duration asked from the homeserver, seconds
    sync_timeout: int = Field(default=30, ge=0, le=120)
    #: events per room one sync (or one read-back page) may carry; more are read back
    timeline_limit: int = Field(default=100, ge=1, le=1000)

    @field_validator("homeserver")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("homeserver must be an http(s) URL, e.g. 'https://matrix.org'")
        return value.rstrip("/")

    @field_validator("user_id")
    @classmethod
    def _mxid(cls, value: str) -> str:
        if not (value.startswith("@") and ":" in value):
            raise ValueError("user_id must be a full Matrix id such as '@claw:example.org'")
        return value

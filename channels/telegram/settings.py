"""The ``[channels.telegram]`` config block."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from channels.retry import BackoffSettings

#: What the adapter asks Telegram for; edits become ``kind="edit"`` inbounds (see
#: ``normalize``). Telegram has no deletion update for bots.
DEFAULT_ALLOWED_UPDATES = ["message", "edited_message", "channel_post", "edited_channel_post"]


class TelegramSettings(BackoffSettings):
    """Validated config of one Telegram bot account.

    Secrets are never in the block: ``token_env`` and ``webhook_secret_env`` name the
    environment variables that hold them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_env: str = "TELEGRAM_BOT_TOKEN"  # noqa: S105 (a variable name, not a secret)
    mode: Literal["polling", "webhook"] = "polling"
    #: bot username without "@"; default: asked from Telegram (getMe) at start
    bot_username: str | None = None
    #: Bot API root, the token is appended (tests and self-hosted Bot API servers)
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    allowed_updates: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOWED_UPDATES))

    # --- polling
    #: long-poll duration asked from Telegram, seconds
    poll_timeout: int = Field(default=30, ge=0, le=50)
    #: a poll still running this long after its long-poll timeout is declared stalled
    #: and restarted by the watchdog, seconds
    stall_grace: float = Field(default=15.0, gt=0)

    # --- webhook
    #: public HTTPS URL Telegram posts to; when set, the adapter registers it (setWebhook)
    #: at start, otherwise the operator registers it
    webhook_url: str | None = None
    #: parallel deliveries Telegram may make (setWebhook max_connections, 1-100). With more
    #: than one, updates of one chat can arrive out of order; 1 keeps Telegram's order
    #: and costs little, since the endpoint answers as soon as the message is durable.
    webhook_max_connections: int = Field(default=1, ge=1, le=100)
    #: route the gateway's web app serves
    webhook_path: str = "/telegram/webhook"
    #: env var with the secret Telegram echoes in X-Telegram-Bot-Api-Secret-Token
    webhook_secret_env: str = "TELEGRAM_WEBHOOK_SECRET"  # noqa: S105 (a variable name)

    @field_validator("bot_username")
    @classmethod
    def _strip_at(cls, value: str | None) -> str | None:
        return value.lstrip("@") if value else value

    @field_validator("webhook_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("webhook_path must start with '/', e.g. '/telegram/webhook'")
        return value

"""The ``[channels.slack]`` config block and the secrets it points at."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from channels.envsecret import read_secret

__all__ = ["SlackSecrets", "SlackSettings", "load_secrets"]


class SlackSettings(BaseModel):
    """One Slack app (one workspace bot). Secrets are named by env var, never inlined.

    ``mode = "socket"`` needs an app-level token (``xapp-…``, scope
    ``connections:write``) and no public URL; ``mode = "http"`` needs the signing
    secret and a public HTTPS URL for the Events API route (``webhook_path``).
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["socket", "http"] = "socket"
    # Names of environment variables, not secrets.
    bot_token_env: str = "SLACK_BOT_TOKEN"  # noqa: S105
    app_token_env: str = "SLACK_APP_TOKEN"  # noqa: S105
    signing_secret_env: str = "SLACK_SIGNING_SECRET"  # noqa: S105
    #: Web API base URL; only tests point it elsewhere.
    api_base_url: str = "https://slack.com/api/"
    #: The bot's user id (``U…``); fetched with auth.test at start when absent.
    bot_user_id: str | None = None
    #: Events API route; default ``/slack/events`` (``/slack/<account>/events`` for
    #: a named account).
    webhook_path: str | None = None
    #: In channels and group DMs, reply in a thread under the triggering message even
    #: when it was top-level (1:1 DMs get inline replies unless already in a thread).
    reply_in_thread: bool = True
    #: Socket Mode liveness: ping interval in seconds; 4 missed pongs mark the socket stale.
    ping_interval: float = Field(default=5.0, gt=0)
    #: Seconds for one Web API call.
    request_timeout: int = Field(default=30, gt=0)


@dataclass(frozen=True)
class SlackSecrets:
    """Tokens read from the environment. ``SecretStr`` keeps them out of reprs."""

    bot_token: SecretStr
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None

    def __repr__(self) -> str:
        return "SlackSecrets(**redacted**)"


def load_secrets(settings: SlackSettings, env: Mapping[str, str]) -> SlackSecrets:
    """Read the secrets this mode needs; the error names the variable to set."""
    bot = read_secret(env, settings.bot_token_env, "the Slack bot token (xoxb-…)")
    if settings.mode == "socket":
        app = read_secret(env, settings.app_token_env, "the Slack app-level token (xapp-…)")
        return SlackSecrets(bot_token=bot, app_token=app)
    secret = read_secret(env, settings.signing_secret_env,
                         "the Slack signing secret for the Events API")
    return SlackSecrets(bot_token=bot, signing_secret=secret)

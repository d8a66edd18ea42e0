"""The ``[channels.whatsapp]`` config block and the secrets it points at."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pywa.types.templates import TemplateLanguage

from channels.envsecret import read_secret

__all__ = ["TemplateSettings", "WhatsAppSecrets", "WhatsAppSettings", "load_secrets"]

#: Meta retries an unanswered webhook "with decreasing frequency ... for up to 7 days"
#: (developers.facebook.com/docs/graph-api/webhooks/getting-started). A signed body
#: whose every event is older than that can only be a replay.
MAX_EVENT_AGE_SECONDS = 7 * 24 * 3600


class TemplateSettings(BaseModel):
    """The approved message template sent instead of a free-form reply when the
    24-hour customer-service window is closed. It must have no variables."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    #: the template's language code as approved in WhatsApp Manager, e.g. ``en_US``
    language: str = Field(default="en_US", min_length=2)

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        try:
            TemplateLanguage(value)
        except (ValueError, TypeError):
            # pywa's enum raises TypeError, not ValueError, for an unknown code
            raise ValueError(f"{value!r} is not a WhatsApp template language code "
                             "(such as en_US, de, pt_BR)") from None
        return value


class WhatsAppSettings(BaseModel):
    """One WhatsApp Business phone number on the Cloud API. Secrets are named by
    environment variable, never inlined."""

    model_config = ConfigDict(extra="forbid")

    #: the business phone number's id (WhatsApp Manager > API setup), not the number
    phone_number_id: str = Field(min_length=1, pattern=r"^\d+$")
    # Names of environment variables, not secrets.
    token_env: str = "WHATSAPP_TOKEN"  # noqa: S105
    app_secret_env: str = "WHATSAPP_APP_SECRET"  # noqa: S105
    verify_token_env: str = "WHATSAPP_VERIFY_TOKEN"  # noqa: S105
    #: Graph API origin; only tests point it elsewhere.
    api_base_url: str = "https://graph.facebook.com"
    #: Graph API version the requests name (``/v<version>/<phone_number_id>/messages``).
    api_version: str = Field(default="23.0", pattern=r"^\d+\.\d+$")
    #: webhook route; default ``/whatsapp/webhook`` (``/whatsapp/<account>/webhook``)
    webhook_path: str | None = None
    #: sent when a reply falls outside the 24-hour window; None: nothing is sent and
    #: the delivery outcome records why
    outside_window_template: TemplateSettings | None = None
    #: a signed delivery whose newest event is older than this is refused (401)
    max_event_age: int = Field(default=MAX_EVENT_AGE_SECONDS, ge=60)
    #: seconds for one Graph API call
    request_timeout: float = Field(default=30.0, gt=0)


@dataclass(frozen=True)
class WhatsAppSecrets:
    """The access token, the app secret (webhook signatures) and the verify token
    (subscription handshake). ``SecretStr`` and this repr keep them out of logs."""

    token: SecretStr
    app_secret: SecretStr
    verify_token: SecretStr

    def __repr__(self) -> str:
        return "WhatsAppSecrets(**redacted**)"


def load_secrets(settings: WhatsAppSettings, env: Mapping[str, str]) -> WhatsAppSecrets:
    """Read the three secrets; the error names the variable to set."""
    return WhatsAppSecrets(
        token=read_secret(env, settings.token_env, "the Cloud API access token (system user)"),
        app_secret=read_secret(env, settings.app_secret_env,
                         "the Meta app secret that signs webhook deliveries"),
        verify_token=read_secret(env, settings.verify_token_env,
                           "the verify token you typed in the app's webhook settings"),
    )

"""The ``[channels.email]`` config block."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from channels.retry import BackoffSettings

#: Gmail's servers (https://support.google.com/mail/answer/7126229): IMAP over TLS on
#: 993, SMTP with STARTTLS on 587 (or TLS on 465).
GMAIL_IMAP = "imap.gmail.com"
GMAIL_SMTP = "smtp.gmail.com"
#: Google's token endpoint, used to refresh an OAuth2 access token
GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token"  # noqa: S105 (a URL)

Security = Literal["tls", "starttls", "none"]
#: aioimaplib speaks implicit TLS only (no STARTTLS); every provider offers it on 993
ImapSecurity = Literal["tls", "none"]


class EmailSettings(BackoffSettings):
    """Validated config of one mailbox.

    Secrets are never in the block: ``password_env``, ``client_secret_env`` and
    ``refresh_token_env`` name the environment variables that hold them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the bot's address: mail To it engages, the From of its replies
    address: str
    #: more addresses that reach this mailbox (aliases, ``bot+tag@``): also the bot
    aliases: list[str] = Field(default_factory=list)
    #: login name; default: ``address``
    username: str | None = None
    #: display name in the From of replies
    display_name: str = "PyNanoClaw"

    imap_host: str = GMAIL_IMAP
    imap_port: int | None = None  # default: 993 for tls, 143 otherwise
    imap_security: ImapSecurity = "tls"  # "none": loopback tests and local servers only
    smtp_host: str = GMAIL_SMTP
    smtp_port: int | None = None  # default: 465 for tls, 587 for starttls, 25 for none
    smtp_security: Security = "starttls"

    auth: Literal["password", "oauth2"] = "password"
    #: env var holding the app password (auth = "password")
    password_env: str = "EMAIL_PASSWORD"  # noqa: S105 (a variable name)
    # --- auth = "oauth2": the gateway refreshes the access token from the refresh token
    token_url: str = GOOGLE_TOKEN_URL
    client_id: str | None = None
    client_secret_env: str = "EMAIL_OAUTH_CLIENT_SECRET"  # noqa: S105 (a variable name)
    refresh_token_env: str = "EMAIL_OAUTH_REFRESH_TOKEN"  # noqa: S105 (a variable name)
    #: refresh this long before the access token expires, seconds
    refresh_margin: float = Field(default=120.0, ge=0)

    #: the folder (Gmail: label) that is read; replies are matched against it too
    folder: str = "INBOX"
    #: where the bot's own replies are filed (Gmail: "[Gmail]/Sent Mail")
    sent_folder: str = "Sent"
    #: file a copy of each reply in ``sent_folder``: the bot sends the mail to its own
    #: address too (an envelope-only recipient, never in the headers) and moves that
    #: copy there when it arrives, so it is also the proof that an ambiguous send went
    #: out. Gmail files sent mail itself, so the default "auto" does this unless the
    #: server is Gmail (X-GM-EXT-1); "never" for servers that file it themselves
    append_sent: Literal["auto", "always", "never"] = "auto"
    #: after an ambiguous SMTP failure (connection lost or no answer after the DATA),
    #: how long to look for the reply's own copy (or, on Gmail, its Sent copy) before
    #: sending it again: delivery to the own mailbox is asynchronous, seconds
    sent_wait: float = Field(default=20.0, ge=0)

    #: authserv-ids of the receiving servers whose ``Authentication-Results`` are
    #: believed (RFC 8601 section 5): Gmail writes "mx.google.com"
    trusted_authserv_ids: list[str] = Field(default_factory=lambda: ["mx.google.com"])
    #: addresses ("ada@example.org") and domains ("example.org") allowed to reach the
    #: bot; empty: everyone. Only an authenticated (DMARC/aligned) sender can match.
    allow_from: list[str] = Field(default_factory=list)
    #: whether mail that only Cc's the bot engages it (default: it is context)
    engage_cc: bool = False

    #: use IMAP IDLE when the server offers it; otherwise (or False) poll
    idle: bool = True
    #: re-issue IDLE this often; RFC 2177 asks for less than 29 minutes, seconds
    idle_timeout: float = Field(default=25 * 60.0, gt=0)
    #: polling interval without IDLE, seconds
    poll_interval: float = Field(default=60.0, gt=0)
    #: a message bigger than this is not downloaded: dead-lettered with a log line
    max_message_bytes: int = Field(default=25 * 1024 * 1024, gt=0)
    #: characters of a mail's text passed on (about 8,000 tokens); the rest is cut,
    #: with a note saying so, before the quote stripping and the model
    max_text_chars: int = Field(default=32_000, gt=0)
    #: how long to wait after a 4.7.x "slow down" reply that names no delay, seconds
    throttle_wait: float = Field(default=60.0, gt=0)
    #: IMAP/SMTP command timeout, seconds
    timeout: float = Field(default=30.0, gt=0)

    @field_validator("address", "aliases", "allow_from", mode="after")
    @classmethod
    def _lower(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str):
            return value.strip().lower()
        return [v.strip().lower() for v in value]

    @field_validator("address")
    @classmethod
    def _an_address(cls, value: str) -> str:
        if "@" not in value or value.startswith("@") or value.endswith("@"):
            raise ValueError("address must be the bot's mail address, e.g. 'bot@example.org'")
        return value

    @model_validator(mode="after")
    def _oauth_needs_client(self) -> EmailSettings:
        if self.auth == "oauth2" and not self.client_id:
            raise ValueError("auth = 'oauth2' needs client_id (the OAuth client's id)")
        return self

    @property
    def login(self) -> str:
        return self.username or self.address

    @property
    def own_addresses(self) -> frozenset[str]:
        return frozenset([self.address, *self.aliases])

    def files_sent(self, gmail: bool) -> bool:
        """Whether the bot files its replies in ``sent_folder`` itself (through the copy
        it sends to its own address): not where the server does (Gmail)."""
        return self.append_sent == "always" or (self.append_sent == "auto" and not gmail)

    @property
    def imap_port_resolved(self) -> int:
        if self.imap_port is not None:
            return self.imap_port
        return 993 if self.imap_security == "tls" else 143

    @property
    def smtp_port_resolved(self) -> int:
        if self.smtp_port is not None:
            return self.smtp_port
        return {"tls": 465, "starttls": 587, "none": 25}[self.smtp_security]

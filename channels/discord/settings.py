"""The ``[channels.discord]`` config block."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DiscordSettings(BaseModel):
    """What an operator may set for one Discord bot account.

    The token itself is never in the file: ``token_env`` names the environment
    variable that holds it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_env: str = Field("DISCORD_BOT_TOKEN", min_length=1)
    #: Point the client at another Discord-compatible server (tests, proxies). REST goes
    #: to ``<api_base_url>/api/v10``; the gateway URL is asked from ``GET /gateway/bot``
    #: there unless ``gateway_url`` is set too. discord.py keeps both process-wide.
    api_base_url: str | None = None
    gateway_url: str | None = None
    #: discord.py waits before sending into an exhausted per-route bucket; a wait
    #: longer than this raises ``RateLimited`` to the outbox instead. (429 answers
    #: always go to the outbox at once.) discord.py refuses values below 30 s.
    max_ratelimit_timeout: float = Field(30.0, ge=30.0)
    #: Watchdog: no gateway frame (nor heartbeat ACK) for this long means the connection
    #: is stalled, and discord.py closes it and reconnects (resuming the session).
    heartbeat_timeout: float = Field(60.0, gt=0)
    #: Inbound messages held while the inbox (Redis) is unavailable; beyond this the
    #: oldest waiting one is dropped and logged (the gateway cannot redeliver it).
    inbound_buffer: int = Field(10_000, ge=1)
    #: After each READY, read back at most this many messages per channel that
    #: arrived after the last one stored (restarts, unresumable sessions); 0: off.
    #: Needs the Read Message History permission.
    backfill_limit: int = Field(100, ge=0, le=1000)

    @model_validator(mode="after")
    def _gateway_needs_base(self) -> DiscordSettings:
        if self.gateway_url and not self.api_base_url:
            raise ValueError(
                "channels.discord.gateway_url needs channels.discord.api_base_url too "
                "(against discord.com the gateway is found automatically)"
            )
        for key in ("api_base_url", "gateway_url"):
            value = getattr(self, key)
            if value and "://" not in value:
                raise ValueError(f"channels.discord.{key} must be a URL like http://127.0.0.1:8080")
        return self

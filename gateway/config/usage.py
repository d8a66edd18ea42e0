"""``[usage]``: what model calls cost, and the spending caps that stop them.

Prices are USD per million tokens (input, output, cached input), per model name; the
defaults cover the models the README names and ``[usage.prices."<name>"]`` adds or
overrides one. A model missing from the table is priced as the dearest default, so a
cap still bites for a model the operator forgot to price. Caps are USD per day and per
month (in ``timezone``, the operator's) for ``global`` (everything), each ``group`` and
each ``person``; a hard cap stops model calls, a soft one is reported once (logs and
``pynanoclaw status``). An admin's or the operator's change at run time (``/usage cap``,
``pynanoclaw usage cap``) is kept in Redis and wins over these defaults.
"""

from __future__ import annotations

from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import Field

from gateway.config.base import Section, ZoneName

Scope = Literal["global", "group", "person"]
Period = Literal["day", "month"]


class Price(Section):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    #: cached input tokens (prompt-cache reads); billed instead of ``input`` for them
    cached: float = Field(default=0.0, ge=0)


#: List prices of the README's models (USD per million tokens: Anthropic's and OpenAI's
#: pricing pages); the local model costs nothing.
DEFAULT_PRICES: dict[str, Price] = {
    "claude-sonnet-4-5": Price(input=3.0, output=15.0, cached=0.30),
    "gpt-4.1-mini": Price(input=0.40, output=1.60, cached=0.10),
    "qwen2.5-coder-0.5b-instruct": Price(input=0.0, output=0.0, cached=0.0),
    "smollm2-135m-instruct": Price(input=0.0, output=0.0, cached=0.0),
}


class Caps(Section):
    """One scope's caps, USD; ``None``: no cap."""

    day: float | None = Field(default=None, ge=0)
    month: float | None = Field(default=None, ge=0)
    soft_day: float | None = Field(default=None, ge=0)
    soft_month: float | None = Field(default=None, ge=0)

    def hard(self, period: Period) -> float | None:
        return self.day if period == "day" else self.month

    def soft(self, period: Period) -> float | None:
        return self.soft_day if period == "day" else self.soft_month


class UsageConfig(Section):
    """``[usage]``."""

    #: meter and enforce caps; off: model calls are neither counted nor capped
    enabled: bool = True
    #: the operator's time zone: where a day and a month begin
    timezone: ZoneName = "UTC"
    prices: dict[str, Price] = Field(default_factory=dict)
    caps: dict[Scope, Caps] = Field(default_factory=dict)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def price(self, model: str) -> Price:
        """The price of ``model``: configured, else a default, else the dearest default."""
        found = self.prices.get(model) or DEFAULT_PRICES.get(model)
        if found is not None:
            return found
        return max(DEFAULT_PRICES.values(), key=lambda p: (p.output, p.input))

    def micro_caps(self, scope: str, period: str) -> tuple[int | None, int | None]:
        """(hard, soft) cap of a scope kind for a period, micro-USD (``None``: none)."""
        caps = self.caps.get(scope, Caps())  # type: ignore[call-overload]
        hard = caps.hard(period)  # type: ignore[arg-type]
        soft = caps.soft(period)  # type: ignore[arg-type]
        return (None if hard is None else round(hard * 1_000_000),
                None if soft is None else round(soft * 1_000_000))

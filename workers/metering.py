"""Every model request metered, and refused before it is sent when a cap is reached.

``MeteredModel`` wraps the configured pydantic-ai model (``workers.agent`` wraps it once,
so the turn, each request of its tool loop, fact extraction and reflection all go
through it). The caller says who pays with ``charging(...)`` around its model calls (a
context variable: the model is shared by every group the process serves). Every job
path sets one; a request without one (a test or a tool calling the agent directly) is
sent unmetered with a warning. Per request:

1. estimate its cost: the prompt's tokens (the WordPiece counter of ``workers.budget``)
   plus the most output it may produce (``max_tokens``), at the model's price;
2. reserve the estimate under the global, group and person caps for the day and the
   month that are set (``gateway.queue.Budget``, one atomic script): refused, it raises
   ``BudgetSpent`` and the model is not called;
3. call the model, then settle the reservation with the real cost: the provider's
   usage (input, output, cached), or for the local model (and a provider that reports
   none) the same token counter on the prompt and the answer, logged as *estimated*.

A failed request settles at zero (providers bill completed requests). Who pays: a turn,
its group and the person whose message it answers (the batch's last engaged message,
``Batch.anchor``; their linked identity when they have one); a background job, its
group only.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from gateway.config import ModelConfig, Price, UsageConfig
from gateway.queue import Budget, Counter, Keys, counters, period_ids
from workers.budget import count_tokens

log = logging.getLogger(__name__)

#: call kinds, as ``pynanoclaw usage`` shows them
TURN, FACTS, REFLECTION = "turn", "facts", "reflection"


class BudgetSpent(Exception):
    """A cap refused a model request; nothing was sent to the model."""

    def __init__(self, counter: Counter) -> None:
        super().__init__(f"the {counter.period} cap of {counter.scope} is reached")
        self.counter = counter


@dataclass(frozen=True)
class Charge:
    """Who pays for the model requests made while it is current."""

    budget: Budget
    usage: UsageConfig
    group: str
    person: str | None
    kind: str


_current: ContextVar[Charge | None] = ContextVar("pnc_charge", default=None)


@contextmanager
def charging(client: redis.Redis, usage: UsageConfig, *, group: str, person: str | None,
             kind: str, prefix: str = "pnc:") -> Iterator[Charge]:
    """Charge the model requests made inside the block to ``group`` (and ``person``)."""
    charge = Charge(Budget(client, Keys(prefix)), usage, group, person, kind)
    token = _current.set(charge)
    try:
        yield charge
    finally:
        _current.reset(token)


def cost(price: Price, input_tokens: int, output_tokens: int, cached: int = 0) -> int:
    """micro-USD, rounded up: a price per million tokens times tokens is micro-USD.
    ``input_tokens`` includes the ``cached`` ones (pydantic-ai's usage does)."""
    fresh = max(input_tokens - cached, 0)
    return math.ceil(fresh * price.input + cached * price.cached + output_tokens * price.output)


def _part_text(part: Any) -> str:
    content = getattr(part, "content", None)
    if isinstance(content, str):
        return content
    args = getattr(part, "args", None)
    if args is not None:
        return args if isinstance(args, str) else json.dumps(args, default=str)
    return "" if content is None else json.dumps(content, default=str)


def prompt_tokens(messages: list[ModelMessage], tool_schemas: list[dict[str, Any]]) -> int:
    """Estimated input tokens of a request: its messages, instructions and tool
    definitions (the same count whoever asks: tests script usage from it)."""
    texts = [json.dumps(tool_schemas)] if tool_schemas else []
    for m in messages:
        if isinstance(m, ModelRequest) and m.instructions:
            texts.append(m.instructions)
        texts.extend(_part_text(p) for p in m.parts)
    return sum(count_tokens(t) for t in texts if t)


def tool_schemas(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """What of the tool definitions a request sends, for ``prompt_tokens``."""
    return [{"name": t.name, "description": t.description or "",
             "parameters": t.parameters_json_schema} for t in tools]


def output_limit(model_settings: ModelSettings | None, default: int) -> int:
    limit = (model_settings or {}).get("max_tokens")
    return int(limit) if limit else default


class MeteredModel(WrapperModel):
    """The configured model with a reservation before and a settlement after each
    request (see the module's docstring)."""

    def __init__(self, wrapped: Model, config: ModelConfig) -> None:
        super().__init__(wrapped)
        self.price_name = config.name
        self.max_tokens = config.max_tokens
        #: the local model's FunctionModel reports a word-count guess: count instead
        self.estimate_always = config.provider == "local"

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        charge = _current.get()
        if charge is None or not charge.usage.enabled:
            if charge is None:
                log.warning("unmetered model request: no charge set (wrap it in charging())")
            return await self.wrapped.request(messages, model_settings,
                                              model_request_parameters)
        limit = output_limit(model_settings,
                             output_limit(self.wrapped.settings, self.max_tokens))
        est_in = prompt_tokens(messages, tool_schemas(model_request_parameters.function_tools))
        price = charge.usage.price(self.price_name)
        estimate = cost(price, est_in, limit)
        now = datetime.now(charge.usage.zone)
        cs = counters(now, charge.group, charge.person, charge.usage.micro_caps)
        reservation = charge.budget.reserve(cs, estimate)
        refused = reservation.refused
        if refused is not None:
            log.warning("%s request for %s refused: %s cap of %s reached", charge.kind,
                        charge.group, refused.period, refused.scope)
            raise BudgetSpent(refused)
        settled = False
        day = period_ids(now)["day"]
        try:
            response = await self.wrapped.request(messages, model_settings,
                                                  model_request_parameters)
            u = response.usage
            estimated = self.estimate_always or not (u.input_tokens or u.output_tokens)
            if estimated:
                out_text = " ".join(_part_text(p) for p in response.parts)
                tokens = (est_in, count_tokens(out_text), 0)
            else:
                tokens = (u.input_tokens, u.output_tokens, u.cache_read_tokens)
            crossed = charge.budget.settle(
                reservation, cost(price, *tokens), day=day, kind=charge.kind,
                group=charge.group, person=charge.person, tokens=tokens, estimated=estimated)
            settled = True
            for field in crossed:
                log.warning("soft budget of %s crossed (%s request for %s)", field,
                            charge.kind, charge.group)
            return response
        finally:
            if not settled:  # the request failed: release the reservation
                charge.budget.settle(reservation, 0, day=day, kind=charge.kind,
                                     group=charge.group, person=charge.person,
                                     tokens=(0, 0, 0), estimated=False)

    def request_stream(self, *args: Any, **kwargs: Any) -> Any:
        # No path of ours streams; an unmetered stream must not slip through.
        raise NotImplementedError("streamed requests are not metered")

"""The budget scripts and the meter on a real Valkey: reservation against caps, the
settlement, soft budgets, and usage estimated (never zero) when a model reports none."""

from __future__ import annotations

import redis
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.config import ModelConfig, UsageConfig
from gateway.queue import Budget, Counter, Keys
from tests.pipeline.conftest import Valkey
from workers.metering import TURN, MeteredModel, charging


def _counter(hard: int | None = None, soft: int | None = None) -> Counter:
    return Counter("group:local:g", "day", "d2026-12-03", hard=hard, soft=soft)


def _settle(b: Budget, c: Counter, estimate: int, cost: int) -> list[str]:
    return b.settle([c], estimate, cost, day="d2026-12-03", kind=TURN, group="local:g",
                    person=None, tokens=(cost, 0, 0), estimated=False)


def test_reserve_counts_what_is_in_flight_and_settle_replaces_it(valkey: Valkey) -> None:
    with redis.Redis.from_url(valkey.url) as r:
        b = Budget(r, Keys())
        c = _counter(hard=100)
        assert b.reserve([c], 60) is None
        assert b.reserve([c], 50) == c  # 60 in flight + 50 > 100: refused, nothing added
        assert b.spent(c).reserved == 60
        _settle(b, c, 60, 30)  # it cost less than estimated
        assert (b.spent(c).spent, b.spent(c).reserved) == (30, 0)
        assert b.reserve([c], 70) is None  # 30 + 70 = 100: exactly the cap
        _settle(b, c, 70, 70)
        assert b.reserve([c], 1) == c  # reached
        assert b.set_cap(c.scope, "day", None) == 0  # lifted at run time
        assert b.reserve([c], 1000) is None
        b.reset_cap(c.scope, "day")  # back to the config's 100
        assert b.reserve([c], 1) == c


def test_soft_budget_is_reported_once(valkey: Valkey) -> None:
    with redis.Redis.from_url(valkey.url) as r:
        b = Budget(r, Keys())
        c = _counter(soft=50)
        assert _settle(b, c, 0, 40) == []
        assert _settle(b, c, 0, 20) == ["group:local:g:d2026-12-03"]
        assert _settle(b, c, 0, 20) == []
        assert list(b.soft_crossed()) == ["group:local:g:d2026-12-03"]


async def test_local_model_usage_is_estimated_never_zero(valkey: Valkey) -> None:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Lisbon is the capital of Portugal.")])

    config = ModelConfig(provider="local", name="tiny")
    usage = UsageConfig.model_validate({"prices": {"tiny": {"input": 1.0, "output": 1.0}}})
    agent: Agent[None, str] = Agent(MeteredModel(FunctionModel(answer), config))
    with redis.Redis.from_url(valkey.url) as r:
        with charging(r, usage, group="local:g", person="local:ada", kind=TURN):
            await agent.run("What is the capital of Portugal?")
        log = Budget(r, Keys()).log(next(iter(
            k.decode()[len("pnc:usage:"):] for k in r.scan_iter("pnc:usage:*"))))
    metrics = log[(TURN, "local:g", "local:ada")]
    assert metrics["est"] == 1 and metrics["req"] == 1
    assert metrics["in"] > 0 and metrics["out"] > 0
    assert metrics["cost"] == metrics["in"] + metrics["out"]

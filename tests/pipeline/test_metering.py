"""The budget scripts and the meter on a real Valkey: reservation against caps, the
settlement, soft budgets, and usage estimated (never zero) when a model reports none."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import redis
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.config import ModelConfig, UsageConfig
from gateway.queue import Budget, Counter, Keys, Reservation, counters
from tests.pipeline.conftest import Valkey
from workers.metering import TURN, MeteredModel, charging


def _counter(hard: int | None = None, soft: int | None = None) -> Counter:
    return Counter("group:local:g", "day", "d2026-12-03", hard=hard, soft=soft)


def _settle(b: Budget, held: Reservation, cost: int) -> list[str]:
    return b.settle(held, cost, day="d2026-12-03", kind=TURN, group="local:g",
                    person=None, tokens=(cost, 0, 0), estimated=False)


def test_reserve_counts_what_is_in_flight_and_settle_replaces_it(valkey: Valkey) -> None:
    with redis.Redis.from_url(valkey.url) as r:
        b = Budget(r, Keys())
        c = _counter(hard=100)
        first = b.reserve([c], 60)
        assert first.refused is None and first.held == (c,)
        # 60 in flight + 50 > 100: refused, nothing added
        assert b.reserve([c], 50).refused == c
        assert b.spent(c).reserved == 60
        _settle(b, first, 30)  # it cost less than estimated
        assert (b.spent(c).spent, b.spent(c).reserved) == (30, 0)
        second = b.reserve([c], 70)
        assert second.refused is None  # 30 + 70 = 100: exactly the cap
        _settle(b, second, 70)
        assert b.reserve([c], 1).refused == c  # reached
        assert b.set_cap(c.scope, "day", None) == 0  # lifted at run time
        assert b.reserve([c], 1000).refused is None
        b.reset_cap(c.scope, "day")  # back to the config's 100
        assert b.reserve([c], 1).refused == c


def test_soft_budget_is_reported_once(valkey: Valkey) -> None:
    with redis.Redis.from_url(valkey.url) as r:
        b = Budget(r, Keys())
        c = _counter(soft=50)
        nothing = Reservation((c,), 0)  # no cap: nothing was reserved
        assert _settle(b, nothing, 40) == []
        assert _settle(b, nothing, 20) == ["group:local:g:d2026-12-03"]
        assert _settle(b, nothing, 20) == []
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


def test_a_cap_on_one_scope_holds_under_concurrency_with_the_uncapped_skipped(
        valkey: Valkey) -> None:
    """Only two of a turn's six counters have a cap (the person's day, set at run time;
    the group's month, from the config): the reserve neither reads nor writes the four
    others, and 16 concurrent reserves still never overshoot the person's cap. Every
    counter gets the spend at the settle."""
    caps = {("group", "month"): 1_000_000}
    cs = counters(datetime(2026, 12, 3, 12, tzinfo=UTC), "local:g", "local:ann",
                  lambda kind, period: (caps.get((kind, period)), None))
    person_day, group_month = cs[4], cs[3]
    assert (person_day.scope, person_day.period) == ("person:local:ann", "day")
    assert (group_month.scope, group_month.period) == ("group:local:g", "month")
    with redis.Redis.from_url(valkey.url) as r:
        Budget(r, Keys()).set_cap(person_day.scope, "day", 1000)
        with ThreadPoolExecutor(16) as pool:
            out = list(pool.map(lambda _: Budget(r, Keys()).reserve(cs, 100), range(16)))
        ok = [x for x in out if x.refused is None]
        assert len(ok) == 10  # 10 x 100 fit under 1000, not one more
        assert all(x.refused == person_day for x in out if x not in ok)
        assert all(x.held == (group_month, person_day) for x in ok)
        keys = Keys()
        for c in cs:
            reserved = r.hget(keys.budget(c.scope, c.period_id), "reserved")
            if c in (person_day, group_month):
                assert int(reserved or 0) == 1000
            else:
                assert reserved is None  # skipped: no cap, nothing to hold
        b = Budget(r, keys)
        for x in ok:
            _settle(b, x, 100)
        assert all((b.spent(c).spent, b.spent(c).reserved) == (1000, 0) for c in cs)
        assert all(int(r.ttl(keys.budget(c.scope, c.period_id))) > 0 for c in cs)
        assert b.reserve(cs, 1).refused == person_day


def test_a_cap_set_between_reserve_and_settle_leaves_nothing_reserved(
        valkey: Valkey) -> None:
    """The settle takes back what the reserve held, not what the caps say by then."""
    c = _counter()
    with redis.Redis.from_url(valkey.url) as r:
        b = Budget(r, Keys())
        held = b.reserve([c], 500)
        assert held.refused is None and held.held == ()
        b.set_cap(c.scope, "day", 10_000)  # the operator sets a cap meanwhile
        _settle(b, held, 300)
        assert (b.spent(c).spent, b.spent(c).reserved) == (300, 0)

"""One retrieval for the turn and the ``search_memory`` tool; the hybrid ranking weights
come from ``[memory.ranking]``."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.config import ModelConfig, RankingConfig
from memory_store import BaseMemory, GroupDirectory
from memory_store.backends.hybrid import HybridMemory
from tests.configs import settings_from_mapping
from workers.agent import TurnAgent, TurnRequest
from workers.context import WorkerContext

from .conftest import NOW, Script, msg
from .test_turn import BrokenSearch


async def test_the_tool_survives_a_broken_index_as_the_turn_does(
    group_memory: tuple[GroupDirectory, BaseMemory], caplog: pytest.LogCaptureFixture
) -> None:
    """The tool searches through the turn's function, so a broken index degrades the
    same way: no results, a warning naming the group, and the bot still answers."""
    gd, _ = group_memory
    script = Script([[("search_memory", {"query": "wifi " * 400})], "still here"])
    agent = TurnAgent(script.model(), config=ModelConfig(provider="function", function="a:b"))
    req = TurnRequest(group="telegram:-100", turn_id="t", core=gd.core_memory(), now=NOW,
                      messages=[msg("1", "@bot wifi?", mention=True)],
                      memory=BrokenSearch())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        reply = await agent.run(req)
    assert reply.text == "still here"
    assert script.seen_tool_returns[0] == "No memory matches that query."
    assert caplog.text.count("memory search for telegram:-100 failed") == 2


def test_ranking_defaults_are_the_hybrid_backends() -> None:
    """``[memory.ranking]``'s documented defaults are the backend's own: a worker with no
    such section ranks as the benchmarks measured."""
    params = inspect.signature(HybridMemory.__init__).parameters
    backend = {name: params[name].default for name in RankingConfig.model_fields}
    assert RankingConfig().model_dump() == backend


def test_configured_ranking_reaches_the_workers_memory(tmp_path: Path) -> None:
    raw: dict[str, Any] = {
        "data_dir": str(tmp_path),
        "model": {"provider": "function", "function": "tests.agent.scripted:make_model"},
        "memory": {"backend": "hybrid",
                   "ranking": {"dense_weight": 0.5, "speaker_weight": 0.7, "pool": 50}},
    }
    settings = settings_from_mapping(raw, env={})
    ctx = WorkerContext(settings, redis.Redis())  # no command is sent
    try:
        _, mem = ctx.group_memory("telegram:-100")
        assert isinstance(mem, HybridMemory)
        assert (mem.dense_weight, mem.speaker_weight, mem.pool) == (0.5, 0.7, 50)
        assert mem.lexical_weight == 1.0  # the rest keep their defaults
    finally:
        ctx.close()


def test_ranking_is_only_passed_to_the_hybrid_backend(tmp_path: Path) -> None:
    raw: dict[str, Any] = {"data_dir": str(tmp_path), "memory": {"backend": "file"}}
    settings = settings_from_mapping(raw, env={})
    assert settings.memory.backend_options() == {}
    ctx = WorkerContext(settings, redis.Redis())
    try:
        _, mem = ctx.group_memory("telegram:-100")  # FileMemory takes no ranking
        assert mem.backend == "file"
    finally:
        ctx.close()

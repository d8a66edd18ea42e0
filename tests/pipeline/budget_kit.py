"""A pipeline stack on the metered scripted model (``tests.pipeline.metered_model``),
priced at 1 USD per million tokens in and out: a request's cost in micro-USD is its
token count."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gateway.config import load_config
from gateway.queue import Budget, Counter, Keys, Spent, period_ids
from tests.pipeline.conftest import Stack, Valkey

USAGE = """
[usage]
timezone = "UTC"
[usage.prices.metered]
input = 1.0
output = 1.0
"""


def metered_stack(tmp: Path, valkey: Valkey, usage: str = "") -> Stack:
    s = Stack(tmp, valkey)
    text = s.config_path.read_text(encoding="utf-8").replace(
        'function = "tests.pipeline.scripted:model"',
        'function = "tests.pipeline.metered_model:model"\nname = "metered"\nmax_tokens = 64')
    s.config_path.write_text(text + USAGE + usage, encoding="utf-8")
    s.config = load_config(s.config_path)
    return s


def today() -> str:
    return period_ids(datetime.now(UTC))["day"]


def spent(s: Stack, scope: str, cap: int | None = None) -> Spent:
    return Budget(s.r, Keys()).spent(Counter(scope, "day", today(), hard=cap))

"""Registers platform harnesses for the shared adapter contract suite.

To add a platform: write ``tests/channels/harness_<platform>.py`` exporting
``HARNESSES: list[kit.HarnessSpec]`` and add a line below. A harness module is
imported only when its adapter package exists, so the suite runs before it lands.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.channels.kit import AdapterHarness, HarnessSpec

#: (adapter package, harness module)
HARNESS_MODULES: list[tuple[str, str]] = [
    ("channels.telegram", "tests.channels.harness_telegram"),
    ("channels.slack", "tests.channels.harness_slack"),
    ("channels.discord", "tests.channels.harness_discord"),
    ("channels.signal", "tests.channels.harness_signal"),
    ("channels.email", "tests.channels.harness_email"),
    ("channels.whatsapp", "tests.channels.harness_whatsapp"),
    ("channels.matrix", "tests.channels.harness_matrix"),
]


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def registered_harnesses() -> list[HarnessSpec]:
    specs: list[HarnessSpec] = []
    for package, harness_module in HARNESS_MODULES:
        if not (_available(package) and _available(harness_module)):
            continue
        module = importlib.import_module(harness_module)
        specs.extend(getattr(module, "HARNESSES", []))
    return specs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    specs = registered_harnesses()
    if "norm_case" in metafunc.fixturenames:
        pairs = [(spec, name, expect) for spec in specs for name, expect in spec.cases()]
        metafunc.parametrize(
            ("contract_spec", "norm_case"),
            [(spec, (name, expect)) for spec, name, expect in pairs],
            ids=[f"{spec.id}:{name}" for spec, name, _ in pairs],
        )
    elif "contract_spec" in metafunc.fixturenames:
        metafunc.parametrize("contract_spec", specs, ids=[spec.id for spec in specs])


@pytest.fixture
async def harness(contract_spec: HarnessSpec) -> AsyncIterator[AdapterHarness]:
    async with contract_spec.factory() as started:
        yield started


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "contract: the shared adapter contract suite")

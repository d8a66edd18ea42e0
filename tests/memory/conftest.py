"""Fixtures for the memory_store contract suite: one Memory per backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memory_helpers import BACKENDS, GROUP, backend_options

from memory_store import BaseMemory, open_memory


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def mem(data_dir: Path, backend: str) -> Iterator[BaseMemory]:
    m = open_memory(data_dir, GROUP, backend, **backend_options(backend))
    yield m
    m.close()

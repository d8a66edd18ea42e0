"""Shared constants and options for the memory tests (imported by conftest and tests)."""

from __future__ import annotations

from typing import Any

BACKENDS = ["file"]
GROUP = "test:g1"


def backend_options(backend: str) -> dict[str, Any]:
    """Options shared by all memories of a backend in this test session."""
    return {}

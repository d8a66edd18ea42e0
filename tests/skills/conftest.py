"""The pipeline's real Valkey, for the end-to-end skill test."""

from __future__ import annotations

from tests.pipeline.conftest import valkey  # noqa: F401 (the pipeline's Valkey fixture)

"""Worker settings from a mapping, for tests: the validation and the model-key read a
worker does (``load_worker_settings``), without a file on disk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config import Settings, parse_config, with_model_key


def settings_from_mapping(raw: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    return with_model_key(parse_config(raw, env=env), env)

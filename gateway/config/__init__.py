"""The configuration: one TOML file plus environment variables, read by every process.

The gateway, each worker and ``pynanoclaw memory`` call ``load_config`` and read their
slice of the same validated ``Settings``; a worker adds its model key with
``with_model_key``. One error type (``ConfigError``), one place for each environment
variable (``gateway.config.env``), one validation of the Redis URL. Imports only pydantic
(and the standard library): workers import it as the contract it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gateway.config.background import (
    background_workers,
    extraction_enabled,
    transcribe_workers,
    voice_can_arrive,
)
from gateway.config.env import CONFIG_ENV, REDIS_URL_ENV
from gateway.config.exits import CommandExit, WorkerExit
from gateway.config.load import (
    ConfigError,
    config_path,
    describe,
    key_env_name,
    load_config,
    parse_config,
    with_model_key,
)
from gateway.config.sections import (
    MemoryConfig,
    ModelConfig,
    PolicyConfig,
    RankingConfig,
    Settings,
)
from gateway.config.usage import Price, UsageConfig


def load_worker_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None
                         ) -> Settings:
    """A worker's read of the file: the same validation, plus the model key."""
    return with_model_key(load_config(path, env), env)


__all__ = [
    "CONFIG_ENV", "REDIS_URL_ENV", "CommandExit", "ConfigError", "MemoryConfig",
    "ModelConfig", "PolicyConfig", "Price", "RankingConfig", "Settings", "UsageConfig",
    "WorkerExit", "background_workers", "config_path",
    "describe", "extraction_enabled", "key_env_name", "load_config", "load_worker_settings",
    "parse_config", "transcribe_workers", "voice_can_arrive", "with_model_key",
]

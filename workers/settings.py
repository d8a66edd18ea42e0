"""The worker's view of the config file: data dir, Redis, model, memory, worker knobs.

The gateway validates its own sections of the same TOML file; this module reads only
``data_dir``, ``[redis]``, ``[model]``, ``[memory]``, ``[worker]`` (and the operator list
``[policy] admins``, read leniently, to rank trust) and ignores the rest.

The model key is read from the environment variable *named* by ``model.api_key_env``
and held as a ``SecretStr``; it never appears in a repr, a log line or an error.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

Provider = Literal["local", "anthropic", "openai", "function"]
Backend = Literal["file", "vector", "hybrid"]

#: Defaults a user gets when ``model.name`` is left out.
DEFAULT_MODEL_NAMES: dict[str, str] = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4.1-mini",
    "local": "smollm2-135m-instruct",
}
#: Env var read when ``model.api_key_env`` is left out (only where a key is mandatory).
DEFAULT_KEY_ENVS: dict[str, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
}
# Same names and defaults as gateway/config.py (workers may not import the gateway).
CONFIG_ENV = "PYNANOCLAW_CONFIG"
REDIS_URL_ENV = "PYNANOCLAW_REDIS_URL"
DEFAULT_CONFIG_PATH = Path("data/pynanoclaw.toml")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "valkey://", "valkeys://")


class ConfigError(Exception):
    """A user error in the config file or environment. The message names the key and
    the fix, and is meant to be printed as is (no traceback)."""


class RedisConfig(BaseModel):
    """``[redis]``; the gateway owns the embedded server's own keys, so extras pass."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    url: str = ""


class ModelConfig(BaseModel):
    """``[model]``: which model answers, and how it is reached."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Provider = "local"
    name: str = ""
    base_url: str = ""
    api_key_env: str = ""
    function: str = ""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_tokens: int = Field(default=1024, gt=0, le=200_000)
    #: Seconds one model request may take before it fails (the RQ job timeout bounds the turn).
    request_timeout: float = Field(default=120.0, gt=0)
    #: Offer the memory tools to the model; turn off for endpoints or small models that
    #: reject tool definitions (the local model never gets them).
    tools: bool = True
    #: Most model requests one turn may make (tool loops included).
    max_requests: int = Field(default=8, gt=0, le=100)
    #: Resolved from the environment, never from the file (an ``api_key`` key is rejected).
    api_key: SecretStr | None = Field(default=None, exclude=True)


class MemoryConfig(BaseModel):
    """``[memory]``: the backend and how much of it a turn sees."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend = "file"
    #: Memory search results put into each turn's prompt.
    search_k: int = Field(default=6, ge=0, le=50)
    #: Bound on each core memory file (global CLAUDE.md, group CLAUDE.md, user_profile.md)
    #: in the prompt; longer files are cut with a note saying so.
    core_max_chars: int = Field(default=8000, ge=200)
    #: Token budget of the memory part of each prompt (core files, then search results
    #: by score); the local model gets at most 400 (``workers.agent``).
    budget_tokens: int = Field(default=2000, ge=100, le=200_000)
    #: Consolidate the group's memory (merge duplicate facts, supersede contradicted
    #: ones, fold facts into entity files) after this many written episodes; 0 = never.
    consolidate_every: int = Field(default=50, ge=0, le=1_000_000)


class WorkerConfig(BaseModel):
    """``[worker]``: job and process knobs shared with the pipeline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: RQ job timeout of a drain job, seconds (the gateway reads it too).
    job_timeout: int = Field(default=300, gt=0)
    #: Bound on the message transcript shown to the model; the oldest *context*
    #: messages are summarized as omitted first, engaged messages are always shown.
    transcript_max_chars: int = Field(default=24_000, ge=1000)


class WorkerSettings(BaseModel):
    """Everything a worker process needs from the config file and environment."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    data_dir: Path = Path("./data")
    redis: RedisConfig = RedisConfig()
    model: ModelConfig = ModelConfig()
    memory: MemoryConfig = MemoryConfig()
    worker: WorkerConfig = WorkerConfig()
    #: ``channel:user_id`` of operators (from ``[policy] admins``): their words rank highest.
    admins: frozenset[str] = frozenset()
    config_path: Path | None = None


def load_worker_settings(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> WorkerSettings:
    """Read and validate the worker's sections of the TOML config at ``path`` (default:
    ``$PYNANOCLAW_CONFIG``, else ``data/pynanoclaw.toml`` if it exists, else built-in
    defaults), resolving the model key from ``env`` (default: ``os.environ``). As in the
    gateway, a relative ``data_dir`` is relative to the file's directory and
    ``$PYNANOCLAW_REDIS_URL`` overrides ``[redis] url``.

    Raises ``ConfigError`` whose message names the key and the fix.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    raw: dict[str, Any] = {}
    config_path: Path | None = None
    if path is None:
        path = environ.get(CONFIG_ENV) or None
    if path is None and DEFAULT_CONFIG_PATH.is_file():
        path = DEFAULT_CONFIG_PATH
    if path is not None:
        config_path = Path(path)
        try:
            with config_path.open("rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(
                f"config file {str(config_path)!r} not found: pass --config PATH or set "
                f"{CONFIG_ENV}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_path}: not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{config_path}: cannot read: {exc.strerror}") from None
    return settings_from_mapping(raw, environ, config_path=config_path)


def settings_from_mapping(
    raw: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    config_path: Path | None = None,
) -> WorkerSettings:
    """Validate an already-parsed config mapping (see ``load_worker_settings``)."""
    data: dict[str, Any] = {}
    for key in ("data_dir", "redis", "model", "memory", "worker"):
        if key in raw:
            data[key] = raw[key]
    for section in ("redis", "model", "memory", "worker"):
        if section in data and not isinstance(data[section], Mapping):
            raise ConfigError(f"{section}: must be a table, write it as [{section}]")
    if isinstance(data.get("model"), Mapping) and "api_key" in data["model"]:
        raise ConfigError(
            "model.api_key: keys do not go in the config file; put the key in an "
            "environment variable and write its NAME in model.api_key_env"
        )
    if env.get(REDIS_URL_ENV):
        data["redis"] = {**dict(data.get("redis") or {}), "url": env[REDIS_URL_ENV]}
    data["admins"] = _admins(raw)
    data["config_path"] = config_path
    try:
        settings = WorkerSettings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    model = _check_model(settings.model, env)
    _check_redis(settings.redis)
    data_dir = settings.data_dir.expanduser()
    if not data_dir.is_absolute() and config_path is not None:
        data_dir = config_path.parent / data_dir
    return settings.model_copy(update={"model": model, "data_dir": data_dir.resolve()})


def _admins(raw: Mapping[str, Any]) -> frozenset[str]:
    # [policy] belongs to the gateway, which validates it; here a malformed list just
    # means "no operators" for trust ranking, never a second error message.
    policy = raw.get("policy")
    if not isinstance(policy, Mapping):
        return frozenset()
    admins = policy.get("admins")
    if not isinstance(admins, list):
        return frozenset()
    return frozenset(a for a in admins if isinstance(a, str))


def _check_model(model: ModelConfig, env: Mapping[str, str]) -> ModelConfig:
    update: dict[str, Any] = {}
    if model.api_key_env and not _ENV_NAME.fullmatch(model.api_key_env):
        # Never echo the value: a user who pasted the key itself here must not see it
        # printed back into a terminal log.
        raise ConfigError(
            "model.api_key_env: must be the NAME of an environment variable "
            "(like ANTHROPIC_API_KEY), not the key itself"
        )
    if model.provider == "function":
        if not _IMPORT_PATH.fullmatch(model.function):
            raise ConfigError(
                f"model.function: {model.function!r} is not an import path; write "
                "'package.module:attribute' naming a pydantic-ai Model or a zero-argument "
                "factory returning one"
            )
        # Optional here: a custom model that reads its own key from this variable gets
        # the same scrubbing of errors and memory as the built-in providers.
        value = env.get(model.api_key_env, "").strip() if model.api_key_env else ""
        return model.model_copy(update={"api_key": SecretStr(value)}) if value else model
    if model.provider == "local":
        if not model.name:
            update["name"] = DEFAULT_MODEL_NAMES["local"]
        return model.model_copy(update=update)
    if model.base_url and not model.base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"model.base_url: {model.base_url!r} must start with http:// or https:// "
            "(for example http://127.0.0.1:11434/v1 for Ollama)"
        )
    if not model.name:
        if model.provider == "openai" and model.base_url:
            raise ConfigError(
                "model.name: required with model.base_url; write the endpoint's model name "
                '(for example name = "llama3.2" for Ollama)'
            )
        update["name"] = DEFAULT_MODEL_NAMES[model.provider]
    key_env = model.api_key_env
    # An OpenAI-compatible server on base_url (Ollama, vLLM) may need no key at all.
    key_required = model.provider == "anthropic" or not model.base_url or bool(key_env)
    if key_required:
        if not key_env:
            key_env = DEFAULT_KEY_ENVS[model.provider]
            update["api_key_env"] = key_env
        value = env.get(key_env, "")
        if not value.strip():
            raise ConfigError(
                f"model.api_key_env: environment variable {key_env} is not set; export it "
                f'with your {model.provider} key, or set model.provider = "local"'
            )
        update["api_key"] = SecretStr(value.strip())
    return model.model_copy(update=update)


def _check_redis(redis: RedisConfig) -> None:
    if redis.url and not redis.url.startswith(_REDIS_SCHEMES):
        raise ConfigError(
            "redis.url: must start with redis://, rediss:// or unix:// "
            "(or leave it empty for the embedded server)"
        )


def _describe(exc: ValidationError) -> str:
    """One line per problem, each naming the dotted key and what would be accepted."""
    lines: list[str] = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "config"
        kind = err["type"]
        if kind == "literal_error":
            expected = str(err.get("ctx", {}).get("expected", ""))
            choices = ", ".join(c.strip().strip("'") for c in re.split(r",| or ", expected))
            lines.append(f"{key}: {err['input']!r} is not one of {choices}")
        elif kind == "extra_forbidden":
            section, _, name = key.rpartition(".")
            known = _known_keys(section)
            hint = f"; known keys: {', '.join(known)}" if known else ""
            lines.append(f"{key}: unknown key {name!r} in [{section}]{hint}")
        else:
            # Never include the rejected input here: it could be a secret in the wrong place.
            lines.append(f"{key}: {err['msg'][0].lower()}{err['msg'][1:]}")
    return "; ".join(lines)


def _known_keys(section: str) -> list[str]:
    models: dict[str, type[BaseModel]] = {
        "model": ModelConfig,
        "memory": MemoryConfig,
        "worker": WorkerConfig,
    }
    cls = models.get(section)
    if cls is None:
        return []
    return [name for name, field in cls.model_fields.items() if not field.exclude]

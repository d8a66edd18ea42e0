"""Reading the config file: the one TOML loader, the one error type, the one place
each environment variable is applied.

Why not pydantic-settings: its sources map environment variables onto fields by name,
and here no environment variable is a field. The secrets live in variables the file
*names* (``token_env``, ``api_key_env``), read only by the process that needs them, and
the one override (``$PYNANOCLAW_REDIS_URL``) is applied below in one line. Its TOML
source treats a missing file as empty, which must be an error here; what remains of it
is ``tomllib.load``, which is what this module calls.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, SecretStr, ValidationError

from gateway.config.base import ENV_NAME
from gateway.config.env import CONFIG_ENV, DEFAULT_CONFIG_PATH, DEFAULT_KEY_ENVS, REDIS_URL_ENV
from gateway.config.renamed import renamed_error
from gateway.config.sections import ModelConfig, Settings

#: defaults a user gets when ``model.name`` is left out
DEFAULT_MODEL_NAMES: dict[str, str] = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4.1-mini",
    "local": "smollm2-135m-instruct",  # workers/local_weights.py
}
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _table_model(kind: Any) -> type[BaseModel] | None:
    """The model of a table whose field type is ``kind``: a section's own, or the
    value's of a table of tables (``dict[str, GroupConfig]``); None for anything else."""
    if get_origin(kind) is dict:
        kind = get_args(kind)[1]
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


#: the top-level keys that are tables: every key of ``Settings`` but ``data_dir``
_TABLES = tuple(name for name, f in Settings.model_fields.items()
                if _table_model(f.annotation) or get_origin(f.annotation) is dict)


class ConfigError(Exception):
    """A user error in the config file or the environment. ``str(err)`` is one line per
    problem, each naming the key and the fix; ``path`` is the file (when there is one).
    Never carries a secret's value."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path

    def render(self) -> str:
        """What every process prints (``error: <file>: <key>: <problem>``), no traceback."""
        text = str(self)
        head = "" if self.path is None or text.startswith(str(self.path)) else f"{self.path}: "
        return "\n".join(f"error: {head}{line}" for line in text.splitlines())


def config_path(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``path``, else ``$PYNANOCLAW_CONFIG``, else ``data/pynanoclaw.toml``."""
    env = os.environ if env is None else env
    if path is not None:
        return Path(path)
    return Path(env.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None
                  ) -> Settings:
    """Read and validate the whole file (see ``config_path``). A relative ``data_dir`` is
    relative to the file's directory; ``$PYNANOCLAW_REDIS_URL`` overrides ``[redis] url``.
    The model key is not read (``with_model_key`` does, in the worker)."""
    env = os.environ if env is None else env
    file = config_path(path, env)
    try:
        with file.open("rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(
            f"{file}: config file not found: pass --config PATH or set {CONFIG_ENV} "
            "(deploy/pynanoclaw.example.toml documents every key)", file) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{file}: not valid TOML: {err}. Fix the syntax there.",
                          file) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{file}: cannot read the config file: {err}", file) from None
    return parse_config(raw, source=file, env=env)


def parse_config(raw: Mapping[str, Any], *, source: Path | None = None,
                   env: Mapping[str, str] | None = None) -> Settings:
    """Validate an already-parsed TOML document (see ``load_config``)."""
    env = os.environ if env is None else env
    data = dict(raw)
    for name in _TABLES:
        if name in data and not isinstance(data[name], Mapping):
            raise ConfigError(f"{name}: must be a table, write it as [{name}]", source)
    channels = data.get("channels", {})
    for name, block in channels.items():
        if not isinstance(block, Mapping):
            raise ConfigError(f"channels.{name}: must be a table: write [channels.{name}] on "
                              "its own line", source)
    if "api_key" in data.get("model", {}):
        raise ConfigError(
            "model.api_key: keys do not go in the config file; put the key in an "
            "environment variable and write its NAME in model.api_key_env", source)
    if "source" in data:
        raise ConfigError("source: unknown key 'source' at the top level", source)
    if env.get(REDIS_URL_ENV):
        data["redis"] = {**dict(data.get("redis") or {}), "url": env[REDIS_URL_ENV]}
    try:
        settings = Settings.model_validate(data)
    except ValidationError as err:
        raise ConfigError(describe(err), source) from None
    data_dir = settings.data_dir.expanduser()
    if not data_dir.is_absolute() and source is not None:
        data_dir = source.parent / data_dir
    return settings.model_copy(update={"data_dir": data_dir.resolve(), "source": source,
                                       "model": _check_model(settings.model, source)})


def with_model_key(settings: Settings, env: Mapping[str, str] | None = None) -> Settings:
    """``settings`` with the model key read from the variable ``model.api_key_env``
    names (held as a ``SecretStr``). Only a worker calls this: the key is its one secret.
    Raises ``ConfigError`` when a provider that needs a key has none."""
    env = os.environ if env is None else env
    model = settings.model
    key_env = key_env_name(model)
    value = env.get(key_env, "").strip() if key_env else ""
    if model.provider in ("function", "local") or (model.provider == "openai"
                                                  and model.base_url and not key_env):
        # optional: a custom model reading its own key gets the same scrubbing
        if not value:
            return settings
    elif not value:
        raise ConfigError(
            f"model.api_key_env: environment variable {key_env} is not set; export it "
            f'with your {model.provider} key, or set model.provider = "local"',
            settings.source)
    update: dict[str, Any] = {"api_key": SecretStr(value)}
    if key_env and not model.api_key_env:
        update["api_key_env"] = key_env
    return settings.model_copy(update={"model": model.model_copy(update=update)})


def key_env_name(model: ModelConfig) -> str:
    """The variable holding the model key ("" when the provider needs none)."""
    if model.api_key_env:
        return model.api_key_env
    if model.provider == "anthropic" or (model.provider == "openai" and not model.base_url):
        return DEFAULT_KEY_ENVS[model.provider]
    return ""


def _check_model(model: ModelConfig, source: Path | None) -> ModelConfig:
    """What ``[model]`` must satisfy whatever the environment; fills in default names."""
    if model.api_key_env and not ENV_NAME.fullmatch(model.api_key_env):
        # never echo the value: it may be the key itself, pasted into the wrong place
        raise ConfigError("model.api_key_env: must be the NAME of an environment variable "
                          "(like ANTHROPIC_API_KEY), not the key itself", source)
    if model.provider == "function":
        if not _IMPORT_PATH.fullmatch(model.function):
            raise ConfigError(
                f"model.function: {model.function!r} is not an import path; write "
                "'package.module:attribute' naming a pydantic-ai Model or a zero-argument "
                "factory returning one", source)
        return model
    if model.provider != "local" and model.base_url and \
            not model.base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"model.base_url: {model.base_url!r} must start with http:// or https:// "
            "(for example http://127.0.0.1:11434/v1 for Ollama)", source)
    if model.name:
        return model
    if model.provider == "openai" and model.base_url:
        raise ConfigError(
            "model.name: required with model.base_url; write the endpoint's model name "
            '(for example name = "llama3.2" for Ollama)', source)
    return model.model_copy(update={"name": DEFAULT_MODEL_NAMES[model.provider]})


def describe(err: ValidationError, prefix: str = "") -> str:
    """One line per problem, each naming the dotted key (after ``prefix``, for a block
    validated on its own) and what would be accepted. Never includes a rejected value
    that could be a secret in the wrong place."""
    lines: list[str] = []
    for e in err.errors():
        loc = [str(p) for p in e["loc"]]
        key = prefix + ".".join(loc) if loc else prefix.rstrip(".") or "config"
        kind = e["type"]
        if kind == "literal_error":
            expected = str(e.get("ctx", {}).get("expected", ""))
            choices = ", ".join(c.strip().strip("'") for c in re.split(r",| or ", expected))
            lines.append(f"{key}: {e['input']!r} is not one of {choices}")
        elif kind == "extra_forbidden" and (old := renamed_error(key)) is not None:
            lines.append(old)
        elif kind == "extra_forbidden":
            section = (prefix + ".".join(loc[:-1])).rstrip(".")
            known = _known_keys(loc[:-1]) if not prefix else []
            where = f"in [{section}]" if section else "at the top level"
            hint = f"; known keys: {', '.join(known)}" if known else ""
            lines.append(f"{key}: unknown key {loc[-1]!r} {where}{hint}")
        else:
            msg = str(e["msg"]).removeprefix("Value error, ")
            word = msg.split(" ", 1)[0]
            if len(word) == 1 or not word.isupper():  # "Input should" but "MCP server"
                msg = msg[0].lower() + msg[1:]
            lines.append(f"{key}: {msg}")
    return "\n".join(lines)


def _known_keys(loc: list[str]) -> list[str]:
    """The keys of the table at ``loc`` (``[]``: not a table of known keys)."""
    cls: type[BaseModel] | None = Settings
    parts = iter(loc)
    for part in parts:
        field = cls.model_fields.get(part) if cls else None
        kind = field.annotation if field else None
        if get_origin(kind) is dict and next(parts, None) is None:
            return []  # the table of tables itself: its keys are the operator's
        cls = _table_model(kind)
    return sorted(n for n, f in cls.model_fields.items() if not f.exclude) if cls else []

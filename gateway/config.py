"""The gateway's configuration: one TOML file plus environment variables.

The gateway validates the sections it owns (``data_dir``, ``[redis]``, ``[policy]``,
``[engage]``, ``[groups."<key>"]``, ``[channels.<name>]`` as raw blocks, ``[queue]``,
``[http]``); ``[model]``, ``[memory]`` and ``[worker]`` belong to ``workers/settings.py``
and are not validated here (only ``worker.job_timeout`` is read, as the RQ job timeout).

Every problem becomes a ``ConfigError`` whose message names the key and the fix; the
CLI prints it without a traceback.
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

log = logging.getLogger(__name__)

CONFIG_ENV = "PYNANOCLAW_CONFIG"
REDIS_URL_ENV = "PYNANOCLAW_REDIS_URL"
DEFAULT_CONFIG_PATH = Path("data/pynanoclaw.toml")

#: top-level tables other components own; a name outside this set is probably a typo
_KNOWN_TOP = {
    "data_dir", "redis", "policy", "engage", "groups", "channels", "queue", "http",
    "model", "memory", "worker",
}

EngageMode = Literal["mention", "trigger", "always"]


class ConfigError(Exception):
    """A user error in the configuration; ``str(err)`` says which key and how to fix it."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RedisConfig(_Section):
    """``[redis]``: an external server's URL, or (empty) an embedded Valkey under the
    data dir with append-only persistence."""

    url: str = ""
    #: embedded server only: TCP port (0 = pick a free one)
    port: int = Field(default=0, ge=0, le=65535)
    #: embedded server only: AOF fsync policy ("always" is safest, "everysec" fastest
    #: with at most one second of writes at risk on a power cut)
    fsync: Literal["always", "everysec", "no"] = "everysec"

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if v and not v.startswith(("redis://", "rediss://", "unix://", "valkey://")):
            raise ValueError("must start with redis://, rediss:// or unix:// (or be empty "
                             "for the embedded server)")
        return v


class PolicyConfig(_Section):
    """``[policy]``: who may talk to the bot."""

    dm: Literal["open", "allowlist", "pairing"] = "open"
    groups: Literal["open", "allowlist"] = "open"
    #: group keys (``channel:chat_id``) and/or user keys (``channel:user_id``)
    allow: list[str] = Field(default_factory=list)
    #: ``channel:user_id`` of operators; always allowed in DMs
    admins: list[str] = Field(default_factory=list)

    @field_validator("allow", "admins")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        for item in v:
            channel, sep, rest = item.partition(":")
            if not sep or not channel or not rest:
                raise ValueError(f"{item!r} is not of the form 'channel:id' (e.g. 'telegram:42')")
        return v


class EngageConfig(_Section):
    """``[engage]``: when a group message makes the bot answer.

    ``mention``: an @mention of the bot or one of ``trigger_words``; ``trigger``: only a
    trigger word; ``always``: every message. DMs always engage. Messages that do not
    engage are kept, all of them, as context for the group's next turn.
    """

    default: EngageMode = "mention"
    trigger_words: list[str] = Field(default_factory=list)


class GroupConfig(_Section):
    """``[groups."<channel:chat_id>"]``: per-group overrides."""

    engage: EngageMode | None = None
    trigger_words: list[str] | None = None


class QueueConfig(_Section):
    """``[queue]``: pipeline tunables (defaults suit one machine)."""

    #: the RQ queue drain jobs go to; every worker must listen on it
    name: str = "pnc-drain"
    #: seconds a drain lease lives without renewal; a dead worker's batch is retried
    #: by the sweeper at most this long after it died
    lease_ttl: float = Field(default=30.0, gt=0)
    #: seconds the per-group turn lock lives without renewal
    lock_ttl: float = Field(default=30.0, gt=0)
    #: how often the gateway looks for groups whose drain job died
    sweep_interval: float = Field(default=5.0, gt=0)
    #: turns one drain job runs before handing the group to a fresh job (fairness)
    max_turns_per_job: int = Field(default=20, ge=1)
    #: seconds a platform message id is remembered for deduplication
    dedupe_ttl: int = Field(default=7 * 24 * 3600, ge=60)
    #: turns of one batch that fail before it is moved aside (dead-lettered)
    max_attempts: int = Field(default=5, ge=1)
    #: RQ ``Retry(max=...)`` of a failed drain job (0: none; the sweeper still retries
    #: a dead worker's batch once its lease expires)
    retries: int = Field(default=3, ge=0)
    #: worker processes ``pynanoclaw run`` starts
    workers: int = Field(default=1, ge=1, le=64)


class HttpConfig(_Section):
    """``[http]``: the gateway's one web server (webhooks + ``/healthz``)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    #: None: serve only when a channel has webhook routes
    enabled: bool | None = None


class GatewayConfig(_Section):
    """The whole gateway configuration."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    data_dir: Path = Path("data")
    redis: RedisConfig = RedisConfig()
    policy: PolicyConfig = PolicyConfig()
    engage: EngageConfig = EngageConfig()
    groups: dict[str, GroupConfig] = Field(default_factory=dict)
    #: raw ``[channels.<name>]`` blocks; each adapter's ``from_config`` validates its own
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)
    queue: QueueConfig = QueueConfig()
    http: HttpConfig = HttpConfig()
    #: RQ job timeout for drain jobs, from ``[worker] job_timeout``
    job_timeout: int = 300
    #: the file this was loaded from (None: built in code)
    source: Path | None = None

    @field_validator("groups")
    @classmethod
    def _group_keys(cls, v: dict[str, GroupConfig]) -> dict[str, GroupConfig]:
        for key in v:
            channel, sep, chat = key.partition(":")
            if not sep or not channel or not chat:
                raise ValueError(f"group key {key!r} must be 'channel:chat_id', "
                                 f"e.g. [groups.\"telegram:-100123\"]")
        return v

    @property
    def redis_dir(self) -> Path:
        return self.data_dir / "redis"


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and validate the config file at ``path`` (default: ``$PYNANOCLAW_CONFIG`` or
    ``data/pynanoclaw.toml``). A relative ``data_dir`` is resolved against the file's
    directory. ``$PYNANOCLAW_REDIS_URL`` overrides ``[redis] url``.

    Raises ``ConfigError`` naming the key and the fix.
    """
    env = os.environ if env is None else env
    path = Path(path) if path is not None else default_config_path(env)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: config file not found. Create it (see deploy/pynanoclaw.example.toml) "
            f"or pass --config / set {CONFIG_ENV}."
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the config file: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}. Fix the syntax there.") from None
    return parse_config(raw, source=path, env=env)


def parse_config(
    raw: Mapping[str, Any], *, source: Path | None = None, env: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Validate an already-parsed TOML document (see ``load_config``)."""
    env = os.environ if env is None else env
    where = str(source) if source is not None else "config"
    for key in raw:
        if key not in _KNOWN_TOP:
            log.warning("%s: unknown top-level key %r ignored (known: %s)",
                        where, key, ", ".join(sorted(_KNOWN_TOP)))
    data: dict[str, Any] = {k: v for k, v in raw.items() if k in _KNOWN_TOP}
    worker = raw.get("worker", {})
    if isinstance(worker, Mapping) and "job_timeout" in worker:
        # [worker] belongs to workers/settings.py; the gateway reads only the job
        # timeout (it sets it when enqueueing), checked just enough for a clear message.
        value = worker["job_timeout"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{where}: worker.job_timeout must be a positive integer "
                              f"(seconds), got {value!r}")
        data["job_timeout"] = value
    channels = data.get("channels", {})
    if isinstance(channels, Mapping):
        for name, block in channels.items():
            if not isinstance(block, Mapping):
                raise ConfigError(f"{where}: channels.{name} must be a table: write "
                                  f"[channels.{name}] on its own line")
    if env.get(REDIS_URL_ENV):
        data["redis"] = {**dict(data.get("redis") or {}), "url": env[REDIS_URL_ENV]}
    try:
        cfg = GatewayConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(where, err)) from None
    data_dir = cfg.data_dir.expanduser()
    if not data_dir.is_absolute() and source is not None:
        data_dir = source.parent / data_dir
    return cfg.model_copy(update={"data_dir": data_dir.resolve(), "source": source})


def format_validation_error(where: str, err: ValidationError, prefix: str = "") -> str:
    """One line per problem: ``<file>: <dotted.key>: <what is wrong>. <how to fix>``."""
    lines: list[str] = []
    for e in err.errors():
        key = prefix + ".".join(str(p) for p in e["loc"]) if e["loc"] else prefix.rstrip(".")
        key = key or "(top level)"
        msg = e["msg"]
        kind = e["type"]
        if kind == "extra_forbidden":
            fix = "unknown key: remove it or fix its spelling"
        elif kind == "literal_error":
            fix = f"{msg}, got {e.get('input')!r}"
            msg = "invalid value"
        elif kind == "missing":
            fix = "add this required key"
        elif _secretish(key) or isinstance(e.get("input"), dict | list):
            fix = ""  # never echo what may be a credential
        else:
            fix = f"got {e.get('input')!r}"
        lines.append(f"{where}: {key}: {msg}" + (f" ({fix})" if fix else ""))
    return "\n".join(lines)


def _secretish(key: str) -> bool:
    last = key.rsplit(".", 1)[-1].lower()
    return any(w in last for w in ("url", "token", "secret", "key", "password"))

"""The sections of the one config file, as pydantic models (``extra="forbid"``
everywhere: a typo is an error naming the key, never silently ignored).

``Settings`` is the whole file. Each process reads the slice it needs: the gateway its
policy, channels, queue and http; a worker its model, memory and worker knobs; the
memory CLI its data dir and backend. The validation is the same for all of them, so the
same broken file gives the same error in every process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator

from gateway.config.base import ENV_NAME, Section, colon_key, group_keyed
from gateway.config.media import MediaConfig
from gateway.config.tasks import TasksConfig
from gateway.config.tools import ToolsConfig
from gateway.config.usage import UsageConfig

Provider = Literal["local", "anthropic", "openai", "function"]
Backend = Literal["file", "vector", "hybrid"]
EngageMode = Literal["mention", "trigger", "always"]

#: schemes redis-py connects to (``valkey://`` is not one: a Valkey speaks redis://)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class RedisConfig(Section):
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
        if v and not v.startswith(REDIS_SCHEMES):
            raise ValueError("must start with redis://, rediss:// or unix:// (or be empty "
                             "for the embedded server)")
        return v


class PolicyConfig(Section):
    """``[policy]``: who may talk to the bot."""

    dm: Literal["open", "allowlist", "pairing"] = "open"
    groups: Literal["open", "allowlist"] = "open"
    #: group keys (``channel:chat_id``) and/or user keys (``channel:user_id``)
    allow: list[str] = Field(default_factory=list)
    #: ``channel:user_id`` of operators; always allowed in DMs, most trusted
    admins: list[str] = Field(default_factory=list)

    @field_validator("allow", "admins")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        for item in v:
            if not colon_key(item):
                raise ValueError(f"{item!r} is not of the form 'channel:id' (e.g. 'telegram:42')")
        return v


class EngageConfig(Section):
    """``[engage]``: when a group message makes the bot answer.

    ``mention``: an @mention of the bot or one of ``trigger_words``; ``trigger``: only a
    trigger word; ``always``: every message. DMs always engage. Messages that do not
    engage are kept, all of them, as context for the group's next turn.
    """

    default: EngageMode = "mention"
    trigger_words: list[str] = Field(default_factory=list)


class GroupConfig(Section):
    """``[groups."<channel:chat_id>"]``: per-group overrides."""

    engage: EngageMode | None = None
    trigger_words: list[str] | None = None


#: a person's name in ``[identities.<name>]``: it names their directory
#: ``<data>/persons/<name>/``, so lowercase letters, digits, ``_`` and ``-`` only
PERSON_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: ids the ``/link`` flow makes start with this; no configured name may
LINKED_PREFIX = "linked-"
_USER_KEY = re.compile(r"[a-z][a-z0-9_-]*:\S+")


class IdentityConfig(Section):
    """``[identities.<name>]``: one person's accounts, linked by the operator. Their DMs
    on every listed channel share one personal memory, ``<data>/persons/<name>/``.

    Members are user keys exactly as ``[policy] allow`` writes them,
    ``<channel>:<sender id>`` (``telegram:42``, ``slack:U0123``, ``local:ada``)."""

    members: list[str] = Field(min_length=1)

    @field_validator("members")
    @classmethod
    def _user_keys(cls, v: list[str]) -> list[str]:
        for item in v:
            if not _USER_KEY.fullmatch(item):
                raise ValueError(f"{item!r} is not a user key 'channel:sender_id' (e.g. "
                                 "'telegram:42', 'slack:U0123')")
        if len(set(v)) != len(v):
            raise ValueError("lists a member twice")
        return v


class QueueConfig(Section):
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
    #: worker processes ``pynanoclaw run`` starts for turns (they also take background
    #: jobs when no turn waits)
    workers: int = Field(default=1, ge=1, le=64)
    #: more processes ``pynanoclaw run`` starts for background jobs alone (fact
    #: extraction, consolidation, redaction), so a turn never waits behind one; "auto":
    #: one when fact extraction is on, else none (``gateway.config.background``)
    background_workers: Annotated[int, Field(ge=0, le=16)] | Literal["auto"] = "auto"


class HttpConfig(Section):
    """``[http]``: the gateway's one web server (webhooks + ``/healthz``)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    #: None: serve only when a channel has webhook routes
    enabled: bool | None = None


class DiskConfig(Section):
    """``[disk]``: free space on the data dir's filesystem (memory files, the embedded
    Redis' append-only file). Below ``warn_free_mb`` the operator is warned (log once,
    ``/healthz``, ``status``); below ``stop_free_mb`` new messages are refused (webhooks
    answer 503, pollers keep their cursors, so the platforms deliver them again later)
    rather than half-handled."""

    warn_free_mb: float = Field(default=500.0, ge=0)
    stop_free_mb: float = Field(default=100.0, ge=0)


class ModelConfig(Section):
    """``[model]``: which model answers, and how it is reached."""

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
    #: Whether the model accepts images in the prompt: unset, Anthropic and OpenAI do
    #: and other providers (local, a compatible server, a scripted one) do not.
    #: An ``openai`` provider with a ``base_url`` is a compatible server: it says so here.
    images: bool | None = None
    #: Resolved from the environment by a worker, never from the file (an ``api_key``
    #: key is rejected).
    api_key: SecretStr | None = Field(default=None, exclude=True)

    @property
    def secret(self) -> str | None:
        """The API key's value, for a client that sends it (or a redactor that hides it)."""
        return self.api_key.get_secret_value() if self.api_key else None

    @property
    def takes_images(self) -> bool:
        """Whether images go to the model as images (``images``, else by provider)."""
        if self.images is not None:
            return self.images
        return self.provider == "anthropic" or (self.provider == "openai"
                                                and not self.base_url)


class RankingConfig(Section):
    """``[memory.ranking]``: how the ``hybrid`` backend fuses its scores. Passed to
    ``memory_store.backends.hybrid.HybridMemory`` as its keyword arguments; the defaults
    are its own, tuned on LoCoMo's tuning conversation (bench/README.md), and a test
    keeps the two equal."""

    #: weight of the BM25 score (min-max normalized over its pool)
    lexical_weight: float = Field(default=1.0, ge=0)
    #: weight of the dense (embedding) score (min-max normalized over its pool)
    dense_weight: float = Field(default=1.0, ge=0)
    #: share of the neighbouring episodes' lexical score an episode gets
    lexical_smooth: float = Field(default=0.5, ge=0)
    #: weight of recency (1 now, halving every ``half_life_days``)
    recency_weight: float = Field(default=0.02, ge=0)
    #: weight of the record's trust (0..1)
    trust_weight: float = Field(default=0.02, ge=0)
    half_life_days: float = Field(default=90.0, gt=0)
    #: candidates each retriever contributes
    pool: int = Field(default=200, ge=1)
    #: added to the records of the people a query names
    speaker_weight: float = Field(default=0.3, ge=0)


class MemoryConfig(Section):
    """``[memory]``: the backend and how much of it a turn sees."""

    backend: Backend = "file"
    #: the hybrid backend's score fusion (``[memory.ranking]``)
    ranking: RankingConfig = RankingConfig()
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
    #: After each turn, a background job asks the model for the batch's durable facts
    #: and writes them into entity files (``workers.extraction``). "auto": on for the
    #: ``anthropic`` and ``openai`` providers (with ``tools``), off for ``local`` (no
    #: structured output) and ``function`` (a scripted model opts in with ``true``).
    extract: bool | Literal["auto"] = "auto"

    def backend_options(self) -> dict[str, Any]:
        """Keyword arguments of the configured backend (``memory_store.open_group``)."""
        return self.ranking.model_dump() if self.backend == "hybrid" else {}


class WorkerConfig(Section):
    """``[worker]``: job and process knobs."""

    #: RQ job timeout of a drain job, seconds (the gateway sets it when enqueueing).
    job_timeout: int = Field(default=300, gt=0)
    #: Bound on the message transcript shown to the model; the oldest *context*
    #: messages are summarized as omitted first, engaged messages are always shown.
    transcript_max_chars: int = Field(default=24_000, ge=1000)
    #: Extra environment variables (names) ``pynanoclaw run`` passes to its workers,
    #: beyond the built-in allowlist and the model key variable (e.g. a custom model's).
    pass_env: list[str] = Field(default_factory=list)

    @field_validator("pass_env")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not ENV_NAME.fullmatch(name):
                raise ValueError("must list NAMES of environment variables")
        return v


class Settings(Section):
    """The whole config file."""

    data_dir: Path = Path("data")
    redis: RedisConfig = RedisConfig()
    policy: PolicyConfig = PolicyConfig()
    engage: EngageConfig = EngageConfig()
    groups: Annotated[dict[str, GroupConfig], group_keyed(
        '[groups."telegram:-100123"]')] = Field(default_factory=dict)
    #: raw ``[channels.<name>]`` blocks; each adapter's ``from_config`` validates its own
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)
    queue: QueueConfig = QueueConfig()
    http: HttpConfig = HttpConfig()
    disk: DiskConfig = DiskConfig()
    model: ModelConfig = ModelConfig()
    memory: MemoryConfig = MemoryConfig()
    worker: WorkerConfig = WorkerConfig()
    usage: UsageConfig = UsageConfig()
    tasks: TasksConfig = TasksConfig()
    #: ``[tools]``: the sandbox per group and the tool host (``gateway.toolhost``)
    tools: ToolsConfig = ToolsConfig()
    #: ``[media]``: files people send, voice transcription (``gateway.media``)
    media: MediaConfig = MediaConfig()
    #: ``[identities.<name>]``: people whose accounts on several channels the operator
    #: linked (the ``/link`` flow adds links in Redis; these always hold)
    identities: dict[str, IdentityConfig] = Field(default_factory=dict)
    #: the file this was loaded from (None: built in code); not a key of the file
    source: Path | None = Field(default=None, exclude=True)

    @field_validator("identities")
    @classmethod
    def _identity_names(cls, v: dict[str, IdentityConfig]) -> dict[str, IdentityConfig]:
        owner: dict[str, str] = {}
        for name, identity in v.items():
            if not PERSON_NAME.fullmatch(name) or name.startswith(LINKED_PREFIX):
                raise ValueError(f"identity name {name!r} must be lowercase letters, digits, "
                                 f"'_' or '-' (it names <data>/persons/{name}/), not "
                                 f"starting with {LINKED_PREFIX!r}, e.g. [identities.alice]")
            for member in identity.members:
                if member in owner:
                    raise ValueError(f"{member!r} is a member of both [identities."
                                     f"{owner[member]}] and [identities.{name}]; a "
                                     "person's account belongs to one identity")
                owner[member] = name
        return v

    def person_of(self, user: str) -> str | None:
        """The configured identity ``user`` (``channel:sender_id``) belongs to, if any."""
        for name, identity in self.identities.items():
            if user in identity.members:
                return name
        return None

    @property
    def redis_dir(self) -> Path:
        """Where the embedded server keeps its data (and its ``url`` file)."""
        return self.data_dir / "redis"

    @property
    def admins(self) -> frozenset[str]:
        """``channel:user_id`` of operators: their words rank highest."""
        return frozenset(self.policy.admins)

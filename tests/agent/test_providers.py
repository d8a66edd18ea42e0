"""Provider selection by config, and HTTP providers end to end against local stubs.

The stubs speak the real wire formats (OpenAI ``/v1/chat/completions``, Anthropic
``/v1/messages``) on 127.0.0.1, with the real SDK clients pointed at them.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel

from gateway.config import ConfigError
from memory_store import BaseMemory, GroupDirectory
from tests.configs import settings_from_mapping
from workers.agent import TurnError, TurnRequest, build_agent, build_model

from .conftest import NOW, SECRET, msg


def settings(model: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return settings_from_mapping({"model": model}, env or {})


def test_anthropic_config_builds_anthropic_model_without_network() -> None:
    s = settings(
        {"provider": "anthropic", "name": "claude-sonnet-4-5"}, {"ANTHROPIC_API_KEY": SECRET}
    )
    with override_allow_model_requests(False):
        model = build_model(s.model)
    assert isinstance(model, AnthropicModel)
    assert model.model_name == "claude-sonnet-4-5"
    assert SECRET not in repr(model)


def test_openai_compatible_config_builds_chat_model_on_base_url() -> None:
    s = settings(
        {"provider": "openai", "name": "llama3.2", "base_url": "http://127.0.0.1:11434/v1"}
    )
    with override_allow_model_requests(False):
        model = build_model(s.model)
    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "llama3.2"
    assert str(model.client.base_url).startswith("http://127.0.0.1:11434/v1")
    # No key configured: a placeholder, never an OPENAI_API_KEY meant for another endpoint.
    assert model.client.api_key == "not-needed"


def test_openai_config_uses_named_key() -> None:
    s = settings(
        {
            "provider": "openai",
            "api_key_env": "OPENROUTER_KEY",
            "name": "x/y",
            "base_url": "https://openrouter.ai/api/v1",
        },
        {"OPENROUTER_KEY": SECRET},
    )
    model = build_model(s.model)
    assert isinstance(model, OpenAIChatModel)
    assert model.client.api_key == SECRET
    agent = build_agent(s)
    assert SECRET not in repr(agent) and "x/y" in repr(agent)


def test_function_provider_accepts_instance_or_factory_and_rejects_others() -> None:
    from . import scripted

    inst = build_model(
        settings({"provider": "function", "function": "tests.agent.scripted:model"}).model
    )
    assert inst is scripted.model
    made = build_model(
        settings({"provider": "function", "function": "tests.agent.scripted:make_model"}).model
    )
    assert isinstance(made, FunctionModel) and made.model_name == "scripted-factory"
    for path, expected in [
        ("tests.agent.nope:model", r"^model\.function: cannot import 'tests\.agent\.nope:model'"),
        ("tests.agent.scripted:missing", r"^model\.function: cannot import"),
        ("tests.agent.scripted:not_a_model", r"returned str, not a pydantic-ai Model"),
        ("tests.agent.scripted:NOT_CALLABLE", r"is a int, not a pydantic-ai Model"),
    ]:
        with pytest.raises(ConfigError, match=expected):
            build_model(settings({"provider": "function", "function": path}).model)


def test_local_provider_without_packages_says_how_to_install(tmp_path: Any) -> None:
    # A fresh interpreter in which xllamacpp cannot be imported (CI without the extra).
    code = (
        "import sys; sys.modules['xllamacpp'] = None\n"
        "from gateway.config import parse_config, with_model_key\n"
        "from workers.agent import build_agent\n"
        "from workers.local_model import LocalModelUnavailable\n"
        "try:\n"
        "    build_agent(with_model_key(parse_config({}, env={}), {}))\n"
        "except LocalModelUnavailable as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "ERR model.provider:" in out.stdout
    assert "pip install 'pynanoclaw[local-model]'" in out.stdout


def test_local_provider_with_missing_gguf_path_names_key() -> None:
    s = settings({"provider": "local", "name": "/nonexistent/model.gguf"})
    with pytest.raises(ConfigError, match=r"^model\.name: GGUF file '/nonexistent/model\.gguf'"):
        build_model(s.model)


# --- end to end over HTTP -----------------------------------------------------------


@dataclass
class Stub:
    """A local model API: records requests, answers from a queue of handlers."""

    answers: list[Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        status, payload = self.answers[min(len(self.requests), len(self.answers)) - 1](body)
        return web.json_response(payload, status=status)


async def serve(stub: Stub, path: str) -> AsyncIterator[Stub]:
    app = web.Application()
    app.router.add_post(path, stub.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    stub.url = f"http://127.0.0.1:{port}"
    try:
        yield stub
    finally:
        await runner.cleanup()


def chat_completion(
    content: str | None, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "stub-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@pytest.fixture
async def openai_stub() -> AsyncIterator[Stub]:
    stub = Stub(answers=[])
    async for s in serve(stub, "/v1/chat/completions"):
        yield s


def request_for(gd: GroupDirectory, mem: BaseMemory, turn: str = "http-1") -> TurnRequest:
    return TurnRequest(
        group="telegram:-100",
        turn_id=turn,
        messages=[
            msg("1", "so the launch is on Tuesday"),
            msg("2", "@bot remember the launch day", mention=True),
        ],
        core=gd.core_memory(),
        memory=mem,
        now=NOW,
    )


async def test_openai_compatible_turn_with_tool_call_over_http(
    openai_stub: Stub,
    group_memory: tuple[GroupDirectory, BaseMemory],
    caplog: pytest.LogCaptureFixture,
) -> None:
    gd, mem = group_memory
    gd.core_path.write_text("# Team\nWe call the bot Clawd.\n", encoding="utf-8")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "remember",
            "arguments": json.dumps(
                {"fact": "The launch is on Tuesday", "about": "launch", "message_id": "1"}
            ),
        },
    }
    openai_stub.answers = [
        lambda body: (200, chat_completion(None, [call])),
        lambda body: (200, chat_completion("Got it: launch on Tuesday.")),
    ]
    s = settings(
        {
            "provider": "openai",
            "name": "stub-model",
            "base_url": openai_stub.url + "/v1",
            "api_key_env": "STUB_KEY",
            "temperature": 0.1,
            "max_tokens": 300,
        },
        {"STUB_KEY": SECRET},
    )
    with caplog.at_level(logging.DEBUG):
        reply = await build_agent(s).run(request_for(gd, mem))
    assert reply.text == "Got it: launch on Tuesday."
    assert reply.requests == 2
    first = openai_stub.requests[0]
    assert first["model"] == "stub-model"
    assert 300 in (first.get("max_tokens"), first.get("max_completion_tokens"))
    assert first["temperature"] == pytest.approx(0.1)
    system = [m for m in first["messages"] if m["role"] in ("system", "developer")]
    assert system and "We call the bot Clawd." in system[0]["content"]
    user = next(m for m in first["messages"] if m["role"] == "user")["content"]
    assert "so the launch is on Tuesday" in str(user)
    tools = {t["function"]["name"] for t in first["tools"]}
    assert tools == {"search_memory", "remember", "update_core", "schedule_task",
                     "list_tasks", "pause_task", "cancel_task"}
    # The key went to the endpoint, and nowhere else.
    assert openai_stub.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in caplog.text
    # The tool call wrote the fact with the cited message's (member) trust.
    rec = await mem.read(reply.written[0])
    assert rec.content.strip() == "The launch is on Tuesday"
    assert rec.trust == pytest.approx(0.5) and rec.source == "telegram:-100:msg/1"
    for path in gd.path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


async def test_openai_auth_error_is_permanent_and_scrubbed(
    openai_stub: Stub,
    group_memory: tuple[GroupDirectory, BaseMemory],
    caplog: pytest.LogCaptureFixture,
) -> None:
    gd, mem = group_memory
    masked = f"{SECRET[:12]}****{SECRET[-4:]}"
    openai_stub.answers = [
        lambda body: (
            401,
            {
                "error": {
                    "message": f"Incorrect API key provided: {masked} / {SECRET}",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )
    ]
    s = settings(
        {
            "provider": "openai",
            "name": "m",
            "base_url": openai_stub.url + "/v1",
            "api_key_env": "K",
        },
        {"K": SECRET},
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(TurnError) as err:
        await build_agent(s).run(request_for(gd, mem))
    assert err.value.transient is False
    assert "401" in str(err.value)
    for text in (str(err.value), caplog.text):
        assert SECRET not in text and SECRET[:12] not in text
    assert len(openai_stub.requests) == 1  # 401 is not retried


@pytest.fixture
async def anthropic_stub() -> AsyncIterator[Stub]:
    stub = Stub(answers=[])
    async for s in serve(stub, "/v1/messages"):
        yield s


async def test_anthropic_turn_over_http(
    anthropic_stub: Stub,
    group_memory: tuple[GroupDirectory, BaseMemory],
    caplog: pytest.LogCaptureFixture,
) -> None:
    gd, mem = group_memory
    gd.profile_path.write_text("Alice runs the launch.", encoding="utf-8")
    anthropic_stub.answers = [
        lambda body: (
            200,
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "Tuesday it is."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 20, "output_tokens": 4},
            },
        )
    ]
    s = settings(
        {"provider": "anthropic", "base_url": anthropic_stub.url, "max_tokens": 500},
        {"ANTHROPIC_API_KEY": SECRET},
    )
    with caplog.at_level(logging.DEBUG):
        reply = await build_agent(s).run(request_for(gd, mem))
    assert reply.text == "Tuesday it is."
    body = anthropic_stub.requests[0]
    assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == 500
    system = (
        body["system"]
        if isinstance(body["system"], str)
        else " ".join(b["text"] for b in body["system"])
    )
    assert "Alice runs the launch." in system
    headers = anthropic_stub.headers[0]
    assert headers.get("x-api-key") == SECRET or headers.get("authorization") == f"Bearer {SECRET}"
    assert SECRET not in caplog.text


async def test_tools_can_be_turned_off_for_an_endpoint(
    openai_stub: Stub, group_memory: tuple[GroupDirectory, BaseMemory]
) -> None:
    gd, mem = group_memory
    openai_stub.answers = [lambda body: (200, chat_completion("Plain answer."))]
    s = settings(
        {"provider": "openai", "name": "tiny", "base_url": openai_stub.url + "/v1", "tools": False}
    )
    reply = await build_agent(s).run(request_for(gd, mem))
    assert reply.text == "Plain answer."
    assert "tools" not in openai_stub.requests[0]
    system = next(m for m in openai_stub.requests[0]["messages"] if m["role"] != "user")
    assert "remember(" not in system["content"]
    assert openai_stub.headers[0]["authorization"] == "Bearer not-needed"


async def test_unreachable_endpoint_is_a_transient_turn_error(
    group_memory: tuple[GroupDirectory, BaseMemory],
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gd, mem = group_memory
    s = settings({"provider": "openai", "name": "m", "base_url": f"http://127.0.0.1:{port}/v1"})
    with pytest.raises(TurnError) as err:
        await build_agent(s).run(request_for(gd, mem))
    assert err.value.transient is True
    assert "Connection" in str(err.value)

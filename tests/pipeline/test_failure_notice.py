"""A turn that fails for good reaches the person: one short notice in the chat, once
per turn, the typing indicator not shown again, the batch in the dead-letter list.
Real Valkey, real worker processes, the gateway and the local channel's client."""

from __future__ import annotations

from pathlib import Path

from gateway.config import load_config
from tests.pipeline.conftest import Stack, Valkey
from workers.turn import FAILURE_NOTICE


def failing_config(path: Path, url: str) -> None:
    path.write_text(f"""
data_dir = "data"
[redis]
url = "{url}"
[model]
provider = "function"
function = "tests.pipeline.failing_model:model"
[memory]
backend = "file"
consolidate_every = 0
[queue]
lease_ttl = 1
lock_ttl = 1
sweep_interval = 0.3
max_attempts = 2
retries = 0
[channels.local]
""", encoding="utf-8")


async def test_a_turn_that_always_fails_tells_the_chat_once(
    tmp_path: Path, valkey: Valkey
) -> None:
    stack = Stack(tmp_path, valkey)
    failing_config(stack.config_path, valkey.url)
    stack.config = load_config(stack.config_path)
    try:
        stack.start_workers(1)
        await stack.start_gateway()
        ex = await stack.ask("ada", "ada", "hello?", timeout=90)
        assert ex.status == "engage" and ex.done
        assert ex.reply == FAILURE_NOTICE
        await stack.settled("local:ada")
        assert stack.r.llen("pnc:dead:local:ada") == 1
        events = stack.chat_events("ada")
        chunks = [e for e in events if e["type"] == "chunk"]
        assert [c["text"] for c in chunks] == [FAILURE_NOTICE]
        assert chunks[0]["reply_to_id"] == ex.message_id
        # every attempt showed "typing"; none came after the notice
        kinds = [e["type"] for e in events]
        assert "typing" in kinds
        assert "typing" not in kinds[kinds.index("chunk"):]
        # the notice is never the model's error text
        assert "always fails" not in FAILURE_NOTICE
        # a second message is a new turn: it fails for good too, and is told once
        ex2 = await stack.ask("ada", "ada", "still there?", timeout=90)
        assert ex2.reply == FAILURE_NOTICE
        await stack.settled("local:ada")
        assert len([e for e in stack.chat_events("ada") if e["type"] == "chunk"]) == 2
    finally:
        await stack.close()

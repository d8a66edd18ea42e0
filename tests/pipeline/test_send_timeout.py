"""``pynanoclaw send`` as a script sees it: a message taken but not answered within
``--timeout`` exits non-zero (not "the bot did not engage"), and a Redis that answers is
never joined by a second bot started in the background, even with no gateway heartbeat
(it lapses while Redis refuses writes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.pipeline.conftest import Stack, Valkey
from tests.pipeline.test_cli import cli


def send(stack: Stack, text: str) -> tuple[int, str, str]:
    done = cli("send", "--config", str(stack.config_path), "--chat", "ann", "--user", "ann",
               "--timeout", "2", text, timeout=60)
    return done.returncode, done.stdout, done.stderr


async def test_send_fails_on_no_reply_and_never_starts_a_second_bot(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey)
    try:
        await stack.start_gateway()  # acks the message; no worker answers it
        code, out, err = await asyncio.to_thread(send, stack, "hello")
        assert code != 0 and out == "" and "no reply within 2s" in err, (code, out, err)
        await stack.stop_gateway()  # Redis answers, no heartbeat
        code, out, err = await asyncio.to_thread(send, stack, "again")
        assert "starting the bot" not in err, err
        assert code != 0 and out == "", (code, out, err)
        assert not (stack.data_dir / "logs" / "run.log").exists()
    finally:
        await stack.close()

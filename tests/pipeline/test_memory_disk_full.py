"""A full memory disk (only ``<data_dir>`` on it; Redis elsewhere keeps working): a turn
that cannot write the chat's memory is shown as retrying with its real cause in
``status`` and ``/healthz`` from its first failure, and is answered once space is back,
once. A tmpfs mounted by the test (root, as in CI); real Valkey and worker process."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.config import load_config
from gateway.operations import status_checks
from gateway.queue import DeadLetters, Keys
from tests.pipeline.conftest import Stack, Valkey
from tests.pipeline.diskfull import fill, small_disk


async def test_a_turn_stalled_on_a_full_disk_is_visible_and_answered_after(
        tmp_path: Path, valkey: Valkey) -> None:
    with small_disk(tmp_path / "data", "16m") as disk:
        stack = Stack(tmp_path, valkey, "[disk]\nwarn_free_mb = 0\nstop_free_mb = 0\n")
        # one attempt allowed: the attempts lost to the full disk must not dead-letter it
        text = stack.config_path.read_text(encoding="utf-8")
        stack.config_path.write_text(text.replace("[queue]\n", "[queue]\nmax_attempts = 1\n"),
                                     encoding="utf-8")
        stack.config = load_config(stack.config_path)
        assert stack.config.queue.max_attempts == 1
        try:
            stack.start_workers(1)
            gw = await stack.start_gateway()
            assert stack.client is not None
            with fill(disk) as filler:
                mid = await stack.client.push(chat_id="ann", user="ann", text="hello")

                def retrying() -> list[str]:
                    return [t.error for t in DeadLetters(stack.r, Keys()).retrying()
                            if t.group == "local:ann"]

                await stack.wait_for(retrying, 60, "the turn shown as retrying")
                assert "DiskFull" in retrying()[0] and "no space" in retrying()[0]
                health = await gw.health()
                assert any(d.startswith("turn local:ann") and "DiskFull" in d
                           for d in health["degraded"]), health["degraded"]
                checks = {c.name: c for c in await asyncio.to_thread(
                    lambda: list(status_checks(stack.config_path, model=False)))}
                assert not checks["turn local:ann"].ok
                assert "DiskFull" in checks["turn local:ann"].detail
                filler.unlink()
            await stack.wait_for(lambda: stack.chunks_for("ann", mid), 90, "the reply")
            await stack.settled("local:ann")
            chunks = stack.chunks_for("ann", mid)
            assert len(chunks) == 1 and chunks[0]["text"].startswith("ack "), chunks
            assert not DeadLetters(stack.r, Keys()).retrying()
            assert not DeadLetters(stack.r, Keys()).counts()
        finally:
            await stack.close()

"""A voice note end to end (issue 28): the fake Bot API serves an espeak-ng voice note,
the gateway's media job stores it and has it transcribed by a real worker on the
transcription queue, and the turn hears what was said, as the sender's words; the
episode keeps it. ``/forget``-style deletion of the file takes the transcript along."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from gateway.queue import DEFAULT_QUEUE, transcribe_queue
from memory_store.files import TRANSCRIPT_SUFFIX
from tests.channels.e2e import worker
from tests.media.stack import ALICE, dm, media_stack
from tests.media.voice import voice_note


async def test_a_voice_note_is_heard_by_the_turn_and_kept_in_the_episode(
        tmp_path: Path) -> None:
    note = voice_note()  # skips when espeak-ng is missing (CI installs it)
    async with media_stack(tmp_path) as stack:
        with worker(stack.config_path, stack.url, {"PNC_TEST_REDIS_URL": stack.url},
                    args=["--queue", transcribe_queue(DEFAULT_QUEUE), "--no-preload"]):
            stack.fake.files["vn1"] = note
            await stack.start_in_loop()
            await stack.fake.enqueue(dm(701, ALICE, voice=("vn1", note)))
            await stack.answered(701, timeout=120)
        [turn] = [t for t in stack.turns() if "701" in t["ids"]]
        heard = turn["prompt"].lower()
        assert "voice note, transcribed:" in heard
        assert "water" in heard and "friday" in heard
        # inside Alice's own message: her words, at her trust
        alice = heard[heard.index("<message id=\"701\""):]
        assert alice.index("voice note, transcribed") < alice.index("</message>")
        assert any(n.endswith(TRANSCRIPT_SUFFIX) for n in stack.attachments())
        episodes = stack.data / "groups" / "telegram" / str(ALICE) / "episodes"
        text = "".join(p.read_text(encoding="utf-8") for p in episodes.rglob("*.md"))
        assert "voice note, transcribed:" in text and "water" in text.lower()


@pytest.mark.slow  # waits out the 20 s grace for a transcription worker to start
async def test_with_no_transcription_worker_the_chat_is_not_held(tmp_path: Path) -> None:
    """Nobody listens on the transcription queue (a setup that runs only turn workers):
    the voice note's message goes on at once, the model is told why there is no text,
    and the job waits in the queue for a transcription worker."""
    note = voice_note()
    async with media_stack(tmp_path) as stack:
        stack.fake.files["vn2"] = note
        await stack.start_in_loop()
        await stack.fake.enqueue(dm(702, ALICE, voice=("vn2", note)))
        await stack.answered(702, timeout=90)  # the grace, not the 120 s wait for a worker
        [turn] = [t for t in stack.turns() if "702" in t["ids"]]
        assert "not transcribed: no transcription worker is running" in turn["prompt"]
        with redis.Redis.from_url(stack.url) as r:
            assert r.llen(f"rq:queue:{transcribe_queue(DEFAULT_QUEUE)}") == 1

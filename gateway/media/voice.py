"""Voice notes in the media job: a stored audio file is transcribed before its message
goes on, so the turn hears what was said.

The transcription is a worker job on its own queue (``gateway.queue.transcribe``: seconds
of CPU, never on a turn worker); the media job queues it and waits for the transcript
beside the file (``memory_store.files._attachments.read_transcript``), at most ``WAIT_MAX``
seconds (or ``[media] transcribe_timeout``). It waits in the gateway's task for that
chat, so the chat's later messages stay behind it (its order), and no worker is held.
With no transcription worker alive (RQ's registry) after ``NO_WORKER_GRACE`` seconds, the
wait ends: the job stays queued for when one starts, and the turn is told. A transcript
not there in time is noted for the model; the job goes on transcribing and the file keeps
its sidecar for later. A redo after a crash finds the sidecar and queues nothing again
(the job itself is idempotent too).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import redis

from channels.models import Attachment, Inbound
from gateway.config import Settings
from gateway.queue.transcribe import enqueue_transcribe, transcribers
from memory_store.files import Transcript, read_transcript

#: seconds a message waits for its voice notes' transcripts at most
WAIT_MAX = 120.0
#: seconds before a missing transcription worker ends the wait: workers start beside the
#: gateway, so a backlog read at start must not find them "missing" while they boot
NO_WORKER_GRACE = 20.0
POLL = 0.25


def is_audio(att: Attachment) -> bool:
    """A stored voice note or audio file (its mime sniffed from the bytes)."""
    return att.stored is not None and (att.mime or "").startswith("audio/")


async def transcribe_all(cfg: Settings, jobs: redis.Redis, folder: Path,
                         group: str, msg: Inbound) -> Inbound:
    """``msg`` with each stored audio attachment's ``transcript`` filled in; ``folder`` is
    the group's ``attachments/``."""
    if cfg.media.transcription == "off" or not any(map(is_audio, msg.attachments)):
        return msg
    out: list[Attachment] = []
    for att in msg.attachments:
        if is_audio(att) and att.transcript is None:
            assert att.stored is not None
            sha = att.stored.partition(".")[0]
            found = await asyncio.to_thread(read_transcript, folder, sha)
            if found is None:
                await asyncio.to_thread(
                    enqueue_transcribe, jobs, group, msg.message_id, sha,
                    queue=cfg.queue.name, timeout=cfg.media.transcribe_timeout)
                found = await _wait(jobs, cfg.queue.name, folder, sha,
                                    min(WAIT_MAX, float(cfg.media.transcribe_timeout)))
            att = att.model_copy(update={"transcript": found.shown()})
        out.append(att)
    return msg.model_copy(update={"attachments": out})


async def _wait(jobs: redis.Redis, queue: str, folder: Path, sha: str,
                seconds: float) -> Transcript:
    started = time.monotonic()
    while (waited := time.monotonic() - started) < seconds:
        found = await asyncio.to_thread(read_transcript, folder, sha)
        if found is not None:
            return found
        if waited > NO_WORKER_GRACE and not await asyncio.to_thread(transcribers, jobs, queue):
            # the job stays queued for when one starts; the chat is not held for nobody
            return Transcript(None, "no transcription worker is running")
        await asyncio.sleep(POLL)
    return Transcript(None, f"no transcript within {seconds:.0f}s")

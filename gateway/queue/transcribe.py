"""The transcription job's contract: its queue, its name, and the one way to enqueue it.

The gateway's media download job calls ``enqueue_transcribe`` right after it stored an
audio file (a voice note, an audio message) under ``<group>/attachments/<sha256>``; a
worker listening on ``transcribe_queue`` (``pynanoclaw run`` starts one:
``python -m workers --queue <drain queue>.transcribe --no-preload``) runs
``workers.transcribe.transcribe_job``, which writes ``<sha256>.transcript.txt`` beside the
file. The gateway reads that sidecar before the turn (``memory_store.files.read_transcript``).

The queue is its own, never a turn worker's: a transcription takes seconds of CPU and
must not hold a turn; a worker runs one job at a time, so a transcription worker
transcribes one file at a time with ``[media] transcribe_threads`` threads. The job is
idempotent (a file already transcribed is skipped), so a duplicate enqueue is harmless.
"""

from __future__ import annotations

import re

import redis

from gateway.queue.jobs import DEFAULT_QUEUE, enqueue_job, job_queue
from gateway.queue.procs import live_workers

#: import path of the transcription job, as RQ resolves it inside a worker
TRANSCRIBE_JOB = "workers.transcribe.transcribe_job"
#: the transcription queue is the drain queue's name plus this
TRANSCRIBE_SUFFIX = ".transcribe"
#: a content hash as the media store names files: 64 lowercase hex digits
SHA256 = re.compile(r"[0-9a-f]{64}")


def transcribe_queue(name: str = DEFAULT_QUEUE) -> str:
    """The name of the transcription queue that goes with drain queue ``name``."""
    return name + TRANSCRIBE_SUFFIX


def transcribers(connection: redis.Redis, queue: str = DEFAULT_QUEUE) -> int:
    """How many workers that run listen on drain queue ``queue``'s transcription queue
    (RQ's registry, without a killed worker's registration on this host)."""
    return len(live_workers(connection, transcribe_queue(queue)))


def enqueue_transcribe(connection: redis.Redis, group: str, message_id: str, sha256: str, *,
                       queue: str = DEFAULT_QUEUE, timeout: int = 600,
                       retries: int = 2) -> str:
    """Queue the transcription of ``<group>/attachments/<sha256>`` (the audio of
    ``message_id``) on drain queue ``queue``'s transcription queue; returns the job id.
    ``timeout`` is ``[media] transcribe_timeout``. Call it only for audio (a voice note,
    an audio message) of an allowed sender, and only while ``[media] transcription`` is
    not "off": then no worker listens to that queue."""
    if not SHA256.fullmatch(sha256):
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    q = job_queue(connection, transcribe_queue(queue))
    return enqueue_job(q, TRANSCRIBE_JOB,
                       {"group": group, "message_id": message_id, "sha256": sha256},
                       timeout=timeout, retries=retries,
                       description=f"transcribe {group} {sha256[:12]}")

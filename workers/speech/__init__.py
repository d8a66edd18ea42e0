"""Speech to text for voice notes and audio messages (issue 28): decoding
(``decode``), the local CPU model (``transcribe_local``) and the provider's API
(``transcribe_openai``). ``workers.transcribe`` runs them as a job."""

from __future__ import annotations

from workers.speech._audio import SAMPLE_RATE, Audio, AudioError, decode
from workers.speech._local import LANGUAGES, transcribe_local
from workers.speech._openai import ProviderRefused, transcribe_openai, wav_bytes

__all__ = [
    "LANGUAGES",
    "SAMPLE_RATE",
    "Audio",
    "AudioError",
    "ProviderRefused",
    "decode",
    "transcribe_local",
    "transcribe_openai",
    "wav_bytes",
]

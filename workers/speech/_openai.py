"""Speech-to-text through the provider: OpenAI's ``/v1/audio/transcriptions`` (or a
compatible server's), with the openai SDK the model client already uses.

The audio sent is what the local path would hear: the decoded, capped PCM as a 16 kHz
mono 16-bit WAV (32 kB a second, so the API's 25 MB limit holds up to
``API_MAX_SECONDS``), never the received file itself, so a file the decoder refused
never leaves the machine. The key is read from the environment variable
``[media] transcription_key_env`` by the worker, at call time; it is never logged.
"""

from __future__ import annotations

import io
import wave

import numpy as np
import numpy.typing as npt
import openai

from gateway.config.media import MediaConfig
from workers.speech._audio import SAMPLE_RATE

#: the API takes files up to 25 MB; a 16 kHz 16-bit mono WAV fills that in ~819 s
API_MAX_SECONDS = 780
#: seconds one request may take
REQUEST_TIMEOUT = 120.0


class ProviderRefused(Exception):
    """The provider refused the request for good (bad key, bad model, bad audio):
    retrying will not help."""


def wav_bytes(pcm: npt.NDArray[np.float32]) -> bytes:
    """``pcm`` (16 kHz mono float) as a 16-bit PCM WAV file."""
    samples = (np.clip(pcm, -1.0, 1.0) * 32767.0).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(samples.tobytes())
    return buf.getvalue()


def transcribe_openai(pcm: npt.NDArray[np.float32], media: MediaConfig, key: str) -> str:
    """The text spoken in ``pcm`` as the provider hears it. Raises ``ProviderRefused``
    on a 4xx other than 408/409/429; other errors (network, 5xx, rate limits) propagate
    as the SDK's for the job's retry."""
    client = openai.OpenAI(api_key=key, base_url=media.transcription_base_url or None,
                           timeout=REQUEST_TIMEOUT, max_retries=0)  # RQ's Retry retries
    try:
        result = client.audio.transcriptions.create(
            model=media.transcription_model,
            file=("voice.wav", wav_bytes(pcm[: API_MAX_SECONDS * SAMPLE_RATE]), "audio/wav"))
    except openai.APIStatusError as exc:
        if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
            raise
        # the status and the error type only: a body may echo what was sent
        raise ProviderRefused(f"the provider refused the audio (HTTP {exc.status_code})"
                              ) from None
    finally:
        client.close()
    return result.text.strip()

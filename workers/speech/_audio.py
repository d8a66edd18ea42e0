"""Decode a received audio file to what speech models take: 16 kHz mono float32 PCM.

PyAV's bundled FFmpeg decodes it (no system ffmpeg). Only the containers voice notes and
audio messages come in are opened (Telegram/WhatsApp/Signal voice notes are ogg/opus,
iOS sends m4a, others mp3, wav, webm, flac): anything else is refused before a decoder
runs on it, so an unexpected format in the attachments folder does not reach FFmpeg's
rarer demuxers. The file is opened without following a symlink.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import av
import av.error
import numpy as np
import numpy.typing as npt

#: sample rate Whisper models (and most speech models) are trained on
SAMPLE_RATE = 16_000
#: FFmpeg demuxer names (``container.format.name`` lists them comma-separated) we accept,
#: and the file extension a transcription API recognises each by
CONTAINERS: dict[str, str] = {
    "ogg": "ogg", "mp3": "mp3", "mov": "m4a", "mp4": "m4a", "m4a": "m4a", "wav": "wav",
    "matroska": "webm", "webm": "webm", "flac": "flac", "aac": "m4a",
}


class AudioError(Exception):
    """The file is not audio we can decode (a permanent failure: retrying will not help)."""


@dataclass(frozen=True)
class Audio:
    pcm: npt.NDArray[np.float32]  #: mono samples in [-1, 1] at ``SAMPLE_RATE``
    truncated: bool  #: the file went on past the cap; ``pcm`` stops there
    suffix: str  #: the extension naming the container ("ogg", "m4a", ...)

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


def container_suffix(format_name: str) -> str | None:
    """The extension for an FFmpeg demuxer name such as "mov,mp4,m4a,3gp,3g2,mj2"; None
    when it is not an audio container we accept."""
    return next((CONTAINERS[name] for name in format_name.split(",") if name in CONTAINERS),
                None)


def decode(path: Path, max_seconds: float) -> Audio:
    """The first ``max_seconds`` of ``path``'s first audio stream as 16 kHz mono PCM.
    Raises ``AudioError`` for a file that is not accepted audio or does not decode,
    ``FileNotFoundError`` for a missing file or a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise FileNotFoundError(str(path)) from exc
    limit = int(max_seconds * SAMPLE_RATE)
    with os.fdopen(fd, "rb") as fh:
        try:
            with av.open(fh, mode="r") as container:
                suffix = container_suffix(container.format.name)
                if suffix is None:
                    raise AudioError(f"not an accepted audio container: {container.format.name}")
                if not container.streams.audio:
                    raise AudioError("no audio stream")
                pcm, truncated = _samples(container, limit)
        except av.error.FFmpegError as exc:
            raise AudioError(f"undecodable audio: {type(exc).__name__}") from None
    if not len(pcm):
        raise AudioError("no audio samples")
    return Audio(pcm, truncated, suffix)


def _samples(container: av.container.InputContainer,
             limit: int) -> tuple[npt.NDArray[np.float32], bool]:
    resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
    chunks: list[npt.NDArray[np.float32]] = []
    count = 0
    for frame in container.decode(audio=0):
        for out in resampler.resample(frame):
            chunk = out.to_ndarray().reshape(-1).astype(np.float32, copy=False)
            chunks.append(chunk)
            count += len(chunk)
        if count >= limit:  # stop decoding: the rest of a long file is never read
            return np.concatenate(chunks)[:limit], True
    for out in resampler.resample(None):  # what the resampler still holds
        chunks.append(out.to_ndarray().reshape(-1).astype(np.float32, copy=False))
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    return pcm, False

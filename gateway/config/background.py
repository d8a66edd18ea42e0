"""Which background work a configuration turns on, decided once for every process.

The gateway needs it to start a worker for background jobs (``pynanoclaw run``), the
workers to queue fact extraction after a turn; both read it from here so they agree.
"""

from __future__ import annotations

from gateway.config.media import voice_missing
from gateway.config.sections import Settings

#: channels that never bring a file, so never a voice note (`pynanoclaw chat` / `send`)
NO_FILES = frozenset({"local"})


def extraction_enabled(settings: Settings) -> tuple[bool, str]:
    """Whether fact extraction runs under ``settings``, and if not, why (one phrase)."""
    want, model = settings.memory.extract, settings.model
    if want is False:
        return False, "[memory] extract = false"
    if model.provider == "local":
        return False, "the local model cannot do structured output"
    if not model.tools:
        return False, "[model] tools = false (structured output needs tool calls)"
    if want == "auto" and model.provider == "function":
        return False, "[memory] extract = \"auto\" is off for a scripted model"
    return True, ""


def background_workers(settings: Settings) -> int:
    """Worker processes ``pynanoclaw run`` starts for background jobs only.

    "auto" is one when fact extraction is on: its model call takes seconds, and a turn
    that arrives meanwhile must not wait for a worker busy with it. Consolidation and
    redaction without extraction are short, and the turn workers take them when idle
    (they listen to the background queue after the drain queue), so no extra process
    (with its own embedding model in memory) is started for them.
    """
    want = settings.queue.background_workers
    if want == "auto":
        return 1 if extraction_enabled(settings)[0] else 0
    return want


def voice_can_arrive(settings: Settings) -> bool:
    """Whether a voice note can reach a turn to be transcribed: transcription and
    downloads on, and a configured channel that carries files."""
    media = settings.media
    return media.transcription != "off" and media.enabled \
        and bool(set(settings.channels) - NO_FILES)


def transcribe_workers(settings: Settings) -> tuple[int, str]:
    """Transcription workers ``pynanoclaw run`` starts (0 or 1), and why none when
    voice notes could arrive but cannot be transcribed (else "").

    None when nothing can bring a voice note (transcription or downloads off, or only
    channels that carry no file, as in the quickstart's config): the process would cost
    seconds of CPU at start and memory all day for nothing. None either when this
    install lacks the voice extra: the jobs would only fail; the reason says how to
    install it (a worker on another host, with the extra, still takes the jobs).
    """
    if not voice_can_arrive(settings):
        return 0, ""
    missing = voice_missing(settings.media.transcription)
    if missing is not None:
        return 0, f"voice notes are not transcribed: {missing}"
    return 1, ""

"""Voice notes transcribed locally (issue 28): an espeak-ng voice note, stored as the
media store stores it, goes through a real worker process on the transcription queue and
comes out as a transcript sidecar; the turn queue is never used."""

from __future__ import annotations

from pathlib import Path

import pytest
from rq.job import Job

from gateway.queue import DEFAULT_QUEUE, enqueue_transcribe, job_queue, transcribe_queue
from memory_store import group_dir
from memory_store.files import read_transcript
from tests.media.voice import store, voice_note
from tests.pipeline.conftest import Stack, Valkey
from workers.speech import AudioError, decode
from workers.transcribe import TRUNCATED_NOTE, write_transcript

GROUP = "telegram:-1001"


async def test_voice_note_transcribed_by_a_transcription_worker(tmp_path: Path) -> None:
    valkey = Valkey(tmp_path / "redis")
    valkey.start()
    stack = Stack(tmp_path, valkey)
    try:
        gpath = group_dir(stack.data_dir, GROUP)
        sha = store(gpath, voice_note())
        # the worker `pynanoclaw run` starts for voice: its own queue, no agent
        stack.start_workers(1, queues=[transcribe_queue(DEFAULT_QUEUE)])
        job_id = enqueue_transcribe(stack.r, GROUP, "m-17", sha)
        job = Job.fetch(job_id, connection=stack.r, serializer="json")
        await stack.wait_for(lambda: job.get_status(refresh=True) in ("finished", "failed"),
                             timeout=120, what="the transcription job")
        found = read_transcript(gpath / "attachments", sha)
        assert found is not None and found.error is None, found
        text = (found.text or "").lower()
        assert "water" in text and "friday" in text, text
        # it ran from the transcription queue; the turn queue was never used
        assert job.origin == transcribe_queue(DEFAULT_QUEUE) != DEFAULT_QUEUE
        assert job.get_status() == "finished" and job.return_value() == "ok"
        assert len(job_queue(stack.r, DEFAULT_QUEUE)) == 0
        assert not stack.r.keys("pnc:drain:*")
    finally:
        await stack.close()
        valkey.stop()


def test_a_file_that_is_not_audio_is_marked_once(tmp_path: Path) -> None:
    gpath = tmp_path / "group"
    sha = store(gpath, b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    first = write_transcript(gpath, sha)
    assert first.text is None and first.error
    assert read_transcript(gpath / "attachments", sha) == first  # the .err sidecar, read back
    # idempotent: an existing sidecar is returned, the file is not transcribed again
    (gpath / "attachments" / f"{sha}.transcript.err").unlink()
    (gpath / "attachments" / f"{sha}.transcript.txt").write_text("kept", encoding="utf-8")
    assert write_transcript(gpath, sha).text == "kept"


def test_a_symlink_in_attachments_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.ogg"
    secret.write_bytes(voice_note())
    folder = tmp_path / "group" / "attachments"
    folder.mkdir(parents=True)
    sha = "ab" * 32
    (folder / sha).symlink_to(secret)
    got = write_transcript(tmp_path / "group", sha)
    assert got.text is None and got.error == "not a regular file"


def test_the_turn_text_of_a_voice_note(tmp_path: Path) -> None:
    sha = "cd" * 32
    folder = tmp_path / "attachments"
    folder.mkdir()
    assert read_transcript(folder, sha) is None  # pending
    (folder / f"{sha}.transcript.err").write_text("no audio stream\n", encoding="utf-8")
    shown = read_transcript(folder, sha)
    assert shown is not None
    assert shown.shown() == "voice note (not transcribed: no audio stream)"
    (folder / f"{sha}.transcript.txt").write_text("Water the plants.", encoding="utf-8")
    shown = read_transcript(folder, sha)
    assert shown is not None and shown.shown() == "voice note, transcribed: Water the plants."


def test_a_hash_that_is_not_one_is_refused(tmp_path: Path) -> None:
    for bad in ("../../etc/passwd", "A" * 64, "0" * 63):
        with pytest.raises(ValueError):
            write_transcript(tmp_path, bad)
    assert not (tmp_path / "attachments").exists()


def test_decoding_stops_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "note.ogg"
    path.write_bytes(voice_note())
    whole = decode(path, 600)
    assert not whole.truncated and 1.5 < whole.seconds < 5 and whole.suffix == "ogg"
    cut = decode(path, 1)
    assert cut.truncated and cut.seconds == 1.0
    link = tmp_path / "link.ogg"
    link.symlink_to(path)
    with pytest.raises(FileNotFoundError):
        decode(link, 600)  # a symlink in attachments/ is never followed


def test_a_long_recording_is_cut_and_says_so(tmp_path: Path) -> None:
    from gateway.config.media import MediaConfig

    gpath = tmp_path / "group"
    sha = store(gpath, voice_note(), ".ogg")  # an extension after the hash is found too
    got = write_transcript(gpath, sha, media=MediaConfig(transcribe_max_seconds=1))
    assert got.text is not None and got.text.endswith(TRUNCATED_NOTE)


def test_a_refused_container_never_reaches_a_decoder(tmp_path: Path) -> None:
    # an MPEG-TS stream with Opus audio: real audio, but not a voice-note container
    import io

    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mpegts") as out:
        stream = out.add_stream("mp2", rate=48_000)
        stream.layout = "mono"
        frame = av.AudioFrame(format="s16", layout="mono", samples=1152)
        frame.sample_rate = 48_000
        for plane in frame.planes:
            plane.update(b"\0" * plane.buffer_size)
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    path = tmp_path / "clip.ts"
    path.write_bytes(buf.getvalue())
    with pytest.raises(AudioError, match="not an accepted audio container"):
        decode(path, 600)


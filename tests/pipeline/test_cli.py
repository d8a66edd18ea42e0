"""The one-command paths, as a user runs them: `pynanoclaw run`, `send`, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.operations import running_embedded_url
from tests.pipeline.conftest import ROOT

CONFIG = """data_dir = "data"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[queue]
workers = 2
[channels.local]
"""


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PNC_TEST_REDIS_URL", None)
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_send_alone_starts_the_bot_answers_and_stops_it(tmp_path: Path) -> None:
    cfg = tmp_path / "pnc.toml"
    cfg.write_text(CONFIG)
    dm = cli("send", "--config", str(cfg), "--chat", "ann", "--user", "ann", "hello")
    assert dm.returncode == 0, dm.stderr
    assert dm.stdout.startswith("ack "), dm.stdout
    assert running_embedded_url(tmp_path / "data" / "redis") is None  # stopped again


@pytest.mark.slow
def test_run_then_send_then_ctrl_c_stops_everything(tmp_path: Path) -> None:
    cfg = tmp_path / "pnc.toml"
    cfg.write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen([sys.executable, "-m", "gateway.cli", "run", "--config", str(cfg),
                            "--log-level", "WARNING"], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        redis_dir = tmp_path / "data" / "redis"
        deadline = time.monotonic() + 60
        while running_embedded_url(redis_dir) is None:
            assert run.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        group = cli("send", "--config", str(cfg), "--chat", "crew", "--group", "--user", "bo",
                    "no mention here")
        assert group.returncode == 0 and group.stdout == ""
        mention = cli("send", "--config", str(cfg), "--chat", "crew", "--group", "--user",
                      "cy", "--mention", "now you")
        assert mention.returncode == 0, mention.stderr
        words = mention.stdout.split()
        assert words[0] == "ack" and len(words) == 3  # saw the unengaged message too
        assert "starting the bot" not in mention.stderr  # it used the running one
    finally:
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=60)
    assert run.returncode == 0, out
    assert b"Traceback" not in out
    assert running_embedded_url(tmp_path / "data" / "redis") is None


@pytest.mark.slow
def test_chat_reads_lines_and_prints_the_replies(tmp_path: Path) -> None:
    cfg = tmp_path / "pnc.toml"
    cfg.write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "chat", "--config", str(cfg),
                           "--user", "ann"], input="hello\nsecond line\n", cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    # piped input: the replies alone, one per line, no prompts or banner (for scripts)
    replies = [line for line in proc.stdout.splitlines() if line.startswith("ack ")]
    assert len(replies) >= 1, proc.stdout
    assert "ann>" not in proc.stdout and "Chatting as" not in proc.stdout
    assert "Traceback" not in proc.stderr

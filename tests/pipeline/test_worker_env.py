"""DESIGN invariant 5 at the process level: `pynanoclaw run` starts its workers with an
allowlisted environment. Channel tokens set in the gateway's environment are absent from
every worker's /proc/<pid>/environ; the model key variable the config names is there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline.conftest import ROOT

TOKENS = {
    "TELEGRAM_BOT_TOKEN": "7000000001:AAF-telegram-token-not-for-workers",
    "SLACK_BOT_TOKEN": "xoxb-slack-token-not-for-workers",
    "SLACK_APP_TOKEN": "xapp-slack-app-token-not-for-workers",
    "SLACK_SIGNING_SECRET": "slack-signing-secret-not-for-workers",
    "DISCORD_BOT_TOKEN": "discord-token-not-for-workers",
    "TELEGRAM_WEBHOOK_SECRET": "telegram-webhook-secret-not-for-workers",
    "SOME_OTHER_SECRET": "anything-else-not-for-workers",
}
MODEL_KEY = ("PNC_TEST_MODEL_KEY", "sk-model-key-the-worker-needs")


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")"
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            out.append(int(entry.name))
    return out


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def _cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def start_run(cfg: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`pynanoclaw run` on ``cfg`` as a process (its workers are its children)."""
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "run", "--config", str(cfg),
                             "--log-level", "WARNING"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_run_starts_workers_without_channel_tokens(tmp_path: Path) -> None:
    cfg = tmp_path / "pnc.toml"
    cfg.write_text(f"""data_dir = "data"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
api_key_env = "{MODEL_KEY[0]}"
[queue]
workers = 2
[channels.local]
""")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **TOKENS, MODEL_KEY[0]: MODEL_KEY[1]}
    env.pop("PNC_TEST_REDIS_URL", None)
    run = start_run(cfg, env)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2:
            assert run.poll() is None and time.monotonic() < deadline, "run did not start"
            workers = [p for p in _children(run.pid) if "workers" in _cmdline(p)]
            time.sleep(0.2)
        for pid in workers:
            environ = _environ(pid)
            for name, value in TOKENS.items():
                assert name not in environ, (pid, name)
                assert value not in "\0".join(environ.values()), (pid, name)
                assert value not in " ".join(_cmdline(pid))
            assert environ[MODEL_KEY[0]] == MODEL_KEY[1]  # the one secret a worker holds
            assert environ["PYNANOCLAW_REDIS_URL"].startswith("redis://")
            assert environ["PATH"] == env["PATH"]
        # the gateway itself does have them (it is the only process that talks to platforms)
        assert _environ(run.pid)["TELEGRAM_BOT_TOKEN"] == TOKENS["TELEGRAM_BOT_TOKEN"]
    finally:
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=60)
    assert run.returncode == 0, out

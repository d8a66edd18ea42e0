"""``pynanoclaw run`` with its data dir on a small disk that fills up mid-turn, as an
operator would meet it: the embedded Valkey refuses writes (``-MISCONF``) and is left
alone (same process), ``run`` keeps running, ``status`` names the cause, and once space
is freed every waiting message is answered, in order and once, with no operator
action. A tmpfs mounted by the test (root, as in CI)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from channels.local import LocalKeys
from gateway.operations import running_embedded_url, status_checks
from tests.pipeline.conftest import ROOT
from tests.pipeline.diskfull import fill, small_disk

LOCAL = LocalKeys("pnc:", "default")


def _wait(predicate: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _replies(r: redis.Redis, chat: str) -> list[tuple[str, str, str]]:
    """(reply id, chunk index, text) of every chunk the chat got, in order."""
    out = []
    for _, fields in r.xrange(LOCAL.out(chat)):
        f = {k.decode(): v.decode() for k, v in fields.items()}
        if f.get("type") == "chunk":
            out.append((f["reply_id"], f["index"], f["text"]))
    return out


def _push(r: redis.Redis, chat: str, mid: str, text: str) -> None:
    r.rpush(LOCAL.inbox, json.dumps({
        "chat_id": chat, "is_group": False, "sender_id": "ann", "sender_name": "ann",
        "message_id": mid, "text": text, "mention": False}))


@pytest.mark.slow
def test_run_survives_a_full_disk_and_answers_everything_after(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "48m") as disk:
        cfg = tmp_path / "pnc.toml"
        cfg.write_text(f"""data_dir = "{disk / 'data'}"
[model]
provider = "function"
function = "tests.pipeline.scripted:model"
[worker]
pass_env = ["PNC_TEST_DIR"]
[queue]
lease_ttl = 3
lock_ttl = 3
sweep_interval = 0.5
[disk]
warn_free_mb = 1
stop_free_mb = 0
[channels.local]
""")
        log_path = tmp_path / "run.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PNC_TEST_DIR": str(tmp_path)}
        env.pop("PNC_TEST_REDIS_URL", None)
        with open(log_path, "wb") as log:
            run = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "run", "--config", str(cfg),
                 "--log-level", "WARNING"], cwd=ROOT, env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            redis_dir = disk / "data" / "redis"
            _wait(lambda: running_embedded_url(redis_dir), "the embedded Redis")
            url = running_embedded_url(redis_dir)
            assert url is not None
            r = redis.Redis.from_url(url, socket_timeout=5)
            pid = int(r.info("server")["process_id"])
            _push(r, "ann", "m1", "BLOCK one")  # holds the worker mid-turn
            _wait(lambda: (tmp_path / "blocked.pid").exists(), "the turn to start")
            _push(r, "ann", "m2", "two")
            _push(r, "ann", "m3", "three")
            _wait(lambda: not r.llen(LOCAL.inbox), "the gateway to take them")

            with fill(disk) as filler:
                def refused() -> bool:
                    try:
                        r.set("probe", "x" * 1_000_000)
                    except redis.ResponseError:
                        return True
                    return False

                _wait(refused, "Valkey to refuse writes", 20)
                _wait(lambda: run.poll() is not None or
                      b"embedded Redis refuses writes" in log_path.read_bytes(),
                      "the supervisor's check")
                assert run.poll() is None, log_path.read_text()
                assert int(r.info("server")["process_id"]) == pid  # never killed
                checks = {c.name: c for c in status_checks(cfg, model=False)}
                assert not checks["redis state"].ok
                assert "append-only file" in checks["redis state"].detail
                assert not checks["disk"].ok
                (tmp_path / "release").write_text("")  # the turn ends on a full disk
                time.sleep(3)  # what killed `run` before: 3 failed checks, then ENOSPC
                assert run.poll() is None, log_path.read_text()
                filler.unlink()  # space is back; nobody restarts anything

            _wait(lambda: len({i for i, _, _ in _replies(r, "ann")}) >= 2,
                  "both turns answered", 90)
            replies = _replies(r, "ann")
            texts = [t for _, _, t in replies]
            assert texts[0].startswith("ack m1"), texts
            assert "m2" in texts[1] and "m3" in texts[1], texts
            assert len(replies) == len(set(replies)) == 2, replies  # nothing doubled
            assert int(r.info("server")["process_id"]) == pid
            r.close()
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.wait(timeout=60)
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        assert run.returncode == 0, log_path.read_text()[-3000:]

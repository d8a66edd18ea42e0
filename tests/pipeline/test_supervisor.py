"""The worker supervisor with real child processes standing in for workers: it never
gives up on workers that keep dying, backs off crashes, logs each cause once with the
signal's name, stops only on a configuration error; and a real worker's exit statuses
tell an unreachable Redis and a missing model from a rejected configuration."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.config import WorkerExit
from gateway.operations import ConfigExit, WorkerSupervisor
from tests.pipeline.conftest import ROOT


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def poll_until(sup: WorkerSupervisor, done: object, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, sup.state()
        sup.poll()
        time.sleep(0.05)


def test_workers_that_keep_dying_never_stop_the_run(caplog: pytest.LogCaptureFixture
                                                     ) -> None:
    caplog.set_level(logging.DEBUG, "gateway.operations._supervisor")
    sup = WorkerSupervisor(2, child("import os, signal; os.kill(os.getpid(), signal.SIGILL)"),
                           env={}, backoff_first=0.01, backoff_max=0.05)
    sup.start()
    try:
        # far more than the old limit (5 restarts per worker per minute)
        poll_until(sup, lambda: sup.deaths.get("killed by SIGILL", 0) >= 30)
    finally:
        sup.stop(grace=1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if "killed by SIGILL" in w]) == 1  # the cause, once
    assert all("killed by" in w or "worker" in w for w in warnings)
    assert sup.state()["workers"]["last_cause"] == "killed by SIGILL"


def test_crashes_back_off(caplog: pytest.LogCaptureFixture) -> None:
    sup = WorkerSupervisor(1, child("raise SystemExit(1)"), env={}, backoff_first=0.2,
                           backoff_max=1.0)
    sup.start()
    try:
        poll_until(sup, lambda: sup.deaths.get("exited with status 1", 0) >= 3)
        slot = sup.slots[0]
        assert slot.failures == 3 and slot.proc is None  # waiting 0.8 s, not spinning
    finally:
        sup.stop(grace=1)


def test_only_a_rejected_configuration_stops_the_run() -> None:
    for code in (WorkerExit.REDIS, WorkerExit.MODEL):
        sup = WorkerSupervisor(1, child(f"raise SystemExit({int(code)})"), env={},
                               backoff_first=0.01, backoff_max=0.02)
        sup.start()
        try:
            poll_until(sup, lambda: sum(sup.deaths.values()) >= 3)
        finally:
            sup.stop(grace=1)
    sup = WorkerSupervisor(1, child("raise SystemExit(2)"), env={})
    sup.start()
    try:
        with pytest.raises(ConfigExit):
            poll_until(sup, lambda: False)
    finally:
        sup.stop(grace=1)


def test_worker_exit_statuses(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    base = """[memory]\nbackend = "file"\n[channels.local]\n"""

    def run(text: str) -> int:
        config.write_text('data_dir = "data"\n' + text, encoding="utf-8")
        return subprocess.run(
            [sys.executable, "-m", "workers", "--config", str(config)], cwd=ROOT,
            capture_output=True, timeout=120, check=False).returncode

    unreachable = '[redis]\nurl = "redis://127.0.0.1:1"\n[model]\nprovider = "function"\n' \
        'function = "tests.pipeline.scripted:model"\n'
    assert run(unreachable + base) == WorkerExit.REDIS
    missing = '[redis]\nurl = "redis://127.0.0.1:1"\n[model]\nprovider = "local"\n' \
        'name = "/nonexistent/model.gguf"\n'
    assert run(missing + base) == WorkerExit.MODEL
    bad = '[redis]\nurl = "redis://127.0.0.1:1"\n[model]\nprovider = "function"\n' \
        'function = "no.such.module:model"\n'
    assert run(bad + base) == WorkerExit.CONFIG

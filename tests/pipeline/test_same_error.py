"""One config module: the gateway, a worker and `pynanoclaw memory` given the same broken
file print the same error, naming the key (no traceback, exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline.conftest import ROOT

BROKEN = {
    "unknown_section": ('[modle]\nprovider = "local"\n[channels.local]\n', "modle"),
    "channel_typo": ('[channel.telegram]\ntoken_env = "T"\n', "channel"),
    "bad_value": ('[model]\nprovider = "antropic"\n[channels.local]\n', "model.provider"),
    "bad_redis_url": ('[redis]\nurl = "valkeys://h:1"\n[channels.local]\n', "redis.url"),
    "not_toml": ("[model\n", "not valid TOML"),
    "missing": (None, "config file not found"),
}


def _stderr(args: list[str]) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    return proc.stderr.strip()


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_gateway_worker_and_memory_cli_print_the_same_error(tmp_path: Path, name: str) -> None:
    text, needle = BROKEN[name]
    path = tmp_path / "pnc.toml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    gateway = _stderr(["-m", "gateway.cli", "gateway", "--config", str(path)])
    worker = _stderr(["-m", "workers", "--config", str(path)])
    memory = _stderr(["-m", "gateway.cli", "memory", "ls", "local:x", "--config", str(path)])
    assert needle in gateway and str(path) in gateway
    assert gateway == worker == memory

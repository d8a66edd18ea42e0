"""Redis records carry a schema version (gateway/queue/version.py): the first process
stamps it; a gateway or worker finding a newer one refuses to start, naming both."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.config import ConfigError
from gateway.queue.version import REDIS_SCHEMA_VERSION
from tests.pipeline.conftest import ROOT, Stack

NEWER = REDIS_SCHEMA_VERSION + 1


async def test_the_gateway_stamps_an_empty_redis(stack: Stack) -> None:
    assert stack.r.get("pnc:schema") is None
    await stack.start_gateway()
    assert stack.r.get("pnc:schema") == str(REDIS_SCHEMA_VERSION).encode()


async def test_a_newer_redis_is_refused_by_gateway_and_worker(stack: Stack) -> None:
    stack.r.set("pnc:schema", NEWER)
    with pytest.raises(ConfigError) as err:
        await stack.start_gateway()
    assert f"schema version {NEWER}" in str(err.value)
    assert f"up to version {REDIS_SCHEMA_VERSION}" in str(err.value)
    stack.gateway = None  # it never started
    done = subprocess.run(
        [sys.executable, "-m", "workers", "--config", str(stack.config_path),
         "--redis-url", stack.valkey.url, "--burst"],
        cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert f"schema version {NEWER}" in done.stderr
    assert stack.r.get("pnc:schema") == str(NEWER).encode()  # never overwritten

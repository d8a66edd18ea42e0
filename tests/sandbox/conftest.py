"""The real sandbox (bubblewrap, user namespaces) for the escape tests: no fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config.tools import SandboxLimits
from gateway.toolhost.sandbox import RunResult, Sandbox, SandboxSpec
from gateway.toolhost.workspace import Mount, workspace_dir
from memory_store.files import group_dir
from tests.pipeline.conftest import valkey  # noqa: F401 (the pipeline's Valkey fixture)

GROUP = "local:alice"
OTHER = "local:bob"
#: what the other group keeps in its core memory, which alice's sandbox must never see
OTHER_SECRET = "bob-core-memory-7f3a91"


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    sb = Sandbox()
    reason = sb.unavailable()
    # CI installs bubblewrap (.ci/run): a missing sandbox is a failure, not a skip
    assert reason is None, reason
    yield sb
    sb.close()


class Box:
    """One group's workspace in a fresh data dir, next to another group's directory."""

    def __init__(self, sb: Sandbox, data: Path) -> None:
        self.sb = sb
        self.data = data
        self.workspace = workspace_dir(data, GROUP, sb.host_uid)
        self.other = group_dir(data, OTHER)
        self.other.mkdir(parents=True)
        (self.other / "CLAUDE.md").write_text(OTHER_SECRET + "\n", encoding="utf-8")

    def run(self, script: str, *, network: bool = False, mounts: tuple[Mount, ...] = (),
            timeout: float | None = None, **limits: float) -> RunResult:
        spec = SandboxSpec(self.workspace, SandboxLimits(**limits),  # type: ignore[arg-type]
                           network=network, mounts=mounts)
        return asyncio.run(self.sb.run(spec, ["sh", "-c", script], timeout=timeout))


@pytest.fixture
def box(sandbox: Sandbox, tmp_path: Path) -> Box:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)  # as an operator's: the sandbox's uid cannot walk into it
    return Box(sandbox, data)

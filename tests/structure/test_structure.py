"""The structure the core promises (issue 7), measured on the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.structure.rules import MAX_NON_BLANK, module_sizes, toml_loaders, violations


def test_import_rules_hold() -> None:
    assert violations() == []


BROKEN = {
    "workers/bad.py": ("from gateway.intake._inbox import Inbox\n", "workers import only"),
    "workers/sdk.py": ("from channels.telegram import TelegramChannel\n", "never a platform"),
    "gateway/leak.py": ("import workers.drain\n", "never imports workers"),
    "gateway/queue/x.py": ("import aiohttp\n", "import only pydantic, redis, rq"),
    "gateway/config/y.py": ("from gateway import inbox\n", "import only pydantic, redis, rq"),
    "memory_store/z.py": ("from ..channels import models\n", "memory_store imports nothing"),
    "channels/w.py": ("from gateway.queue import Keys\n", "channels/ is a leaf"),
}


def test_the_checker_catches_each_broken_rule(tmp_path: Path) -> None:
    for rel, (code, _) in BROKEN.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    found = violations(tmp_path)
    for rel, (_, why) in BROKEN.items():
        assert any(line.startswith(rel) and why in line for line in found), (rel, found)
    assert len(found) == len(BROKEN)


def test_one_toml_loader() -> None:
    assert toml_loaders() == ["gateway/config/load.py"]


def test_no_module_over_400_non_blank_lines() -> None:
    big = {m: n for m, n in module_sizes().items() if n > MAX_NON_BLANK}
    assert big == {}


@pytest.mark.slow
def test_the_trace_sees_the_whole_path_in_both_processes() -> None:
    from tests.structure.trace import traced_files

    files = traced_files()
    assert {"channels/telegram/poller.py", "gateway/intake/_inbox.py", "gateway/queue/jobs.py",
            "gateway/outgoing/_outbox.py", "channels/telegram/channel.py"} <= files["gateway"]
    assert {"workers/drain.py", "workers/turn.py", "workers/agent.py",
            "memory_store/files/_atomic.py"} <= files["worker"]
    assert not any(f.startswith("tests/") for f in set().union(*files.values()))

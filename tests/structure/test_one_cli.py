"""Every command of the four packages parses its arguments with one library, typer
(issue 23): ``pynanoclaw ...``, ``python -m workers``, ``python -m workers.smoke``."""

from __future__ import annotations

import subprocess
import sys

from tests.structure.rules import ROOT, imports, source_files

OTHER_PARSERS = ("argparse", "click", "optparse", "docopt", "fire")


def test_no_module_parses_arguments_with_another_library() -> None:
    found = [f"{i.module}:{i.line} imports {i.target}" for path in source_files()
             for i in imports(path) if i.target.partition(".")[0] in OTHER_PARSERS]
    assert found == []


def test_the_worker_entry_points_answer_help() -> None:
    for module in ("workers", "workers.smoke"):
        out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=True)
        assert f"python -m {module}" in out.stdout and "--config" in out.stdout

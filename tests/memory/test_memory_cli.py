"""The `pynanoclaw memory ...` sub-app."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from memory_store import memory_app, open_memory

runner = CliRunner()


def _seed(data: Path) -> None:
    mem = open_memory(data, "telegram:-1", "file")
    mem.write_sync("Ann likes green tea.", kind="fact", metadata={"id": "tea"})
    mem.write_sync("ann likes GREEN tea", kind="fact", metadata={"id": "tea2", "trust": 0.9})
    mem.write_sync("Deploys happen on Tuesdays.", kind="procedure", metadata={"id": "deploy"})
    mem.close()


def test_ls_show_search(tmp_path: Path) -> None:
    _seed(tmp_path)
    res = runner.invoke(memory_app, ["ls", "telegram:-1", "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "tea2" in res.output and "deploy" in res.output and "3 memories" in res.output
    res = runner.invoke(memory_app, ["show", "telegram:-1", "deploy", "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "Deploys happen on Tuesdays." in res.output and "procedure" in res.output
    res = runner.invoke(memory_app, ["search", "telegram:-1", "when do we deploy",
                                     "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "deploy" in res.output and "tea2" not in res.output


def test_reindex_and_consolidate(tmp_path: Path) -> None:
    _seed(tmp_path)
    shutil.rmtree(tmp_path / "groups" / "telegram" / "-1" / ".index")
    res = runner.invoke(memory_app, ["reindex", "telegram:-1", "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "indexed 3 memories" in res.output
    res = runner.invoke(memory_app, ["consolidate", "telegram:-1", "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "2 records changed" in res.output
    res = runner.invoke(memory_app, ["ls", "telegram:-1", "--data-dir", str(tmp_path)])
    assert "2 memories" in res.output


def test_config_file_supplies_data_dir_and_backend(tmp_path: Path) -> None:
    _seed(tmp_path / "d")
    cfg = tmp_path / "pnc.toml"
    cfg.write_text('data_dir = "d"\n[memory]\nbackend = "file"\n')
    from gateway.cli import app  # `pynanoclaw memory` reads the config through gateway.config

    res = runner.invoke(app, ["memory", "ls", "telegram:-1", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    assert "3 memories" in res.output


def test_errors_are_clear(tmp_path: Path) -> None:
    _seed(tmp_path)
    res = runner.invoke(memory_app, ["show", "telegram:-1", "nope", "--data-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "MemoryNotFound" in res.output
    res = runner.invoke(memory_app, ["show", "telegram:-1", "../x", "--data-dir", str(tmp_path)])
    assert res.exit_code == 2
    res = runner.invoke(memory_app, ["ls", "nogroup", "--data-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "group key" in res.output
    res = runner.invoke(memory_app, ["search", "telegram:-1", "x", "--backend", "magic",
                                     "--data-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "backend" in res.output


def test_search_ranks_with_the_configured_weights(tmp_path: Path) -> None:
    """`pynanoclaw memory search` ranks as the bot does: with `[memory.ranking]`."""
    mem = open_memory(tmp_path / "d", "telegram:-1", "hybrid")
    mem.write_sync("Deploys happen on Tuesdays.", kind="fact", metadata={"id": "deploy",
                                                                         "trust": 0.9})
    mem.flush()
    mem.close()
    cfg = tmp_path / "pnc.toml"
    # a trust weight of 10: the hit's score is at least 9 (at most ~2.06 by default)
    cfg.write_text('data_dir = "d"\n[memory]\nbackend = "hybrid"\n'
                   "[memory.ranking]\ntrust_weight = 10.0\n")
    from gateway.cli import app

    res = runner.invoke(app, ["memory", "search", "telegram:-1", "deploy", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    scores = [float(w) for line in res.output.splitlines() if "deploy" in line
              for w in line.replace("│", " ").split()[:1]]
    assert scores and scores[0] >= 9.0, res.output

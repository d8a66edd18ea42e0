"""A renamed config key: the old name is an error naming the new one; the file is
never rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config


@pytest.mark.parametrize(("old", "new", "where"), [
    ("[worker]\nprocesses = 3\n", "worker.processes: renamed to queue.workers", "[queue]"),
    ("[worker]\nretries = 2\n", "worker.retries: renamed to queue.retries", "[queue]"),
])
def test_an_outdated_key_names_the_new_one(tmp_path: Path, old: str, new: str,
                                           where: str) -> None:
    path = tmp_path / "pnc.toml"
    text = f'[channels.local]\n{old}[model]\nprovider = "local"\n'
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert new in str(err.value) and f"under {where}" in str(err.value)
    assert path.read_text() == text  # never rewritten

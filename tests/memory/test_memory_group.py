"""GroupDirectory: layout, templates, core memory, path safety."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_store import CoreMemory, GroupDirectory, InvalidGroupKey
from memory_store.files import CORE_LIMIT_CHARS, MEMORY_DIRS


def test_ensure_creates_layout_and_templates(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, "telegram:-100123").ensure()
    assert gd.path == tmp_path.resolve() / "groups" / "telegram" / "-100123"
    for sub in MEMORY_DIRS:
        assert (gd.path / sub).is_dir()
    assert (gd.path / ".index").is_dir()
    assert gd.core_path.read_text().startswith("# Group memory")
    assert gd.profile_path.read_text().startswith("# People")


def test_ensure_is_idempotent_and_keeps_edits(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, "slack:C1").ensure()
    gd.core_path.write_text("# mine\nAlways answer in French.\n")
    gd.ensure()
    assert gd.core_path.read_text() == "# mine\nAlways answer in French.\n"


def test_core_memory_reads_global_group_and_profile(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, "discord:42").ensure()
    assert gd.core_memory().global_md == ""
    glob = tmp_path / "groups" / "global"
    glob.mkdir(parents=True)
    (glob / "CLAUDE.md").write_text("operator rules")
    gd.profile_path.write_text("Ann prefers tea")
    core = gd.core_memory()
    assert isinstance(core, CoreMemory)
    assert core.global_md == "operator rules"
    assert core.profile_md == "Ann prefers tea"
    assert "Group memory" in core.group_md


def test_core_memory_is_bounded(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, "discord:43").ensure()
    gd.core_path.write_text("x" * (CORE_LIMIT_CHARS * 2))
    text = gd.core_memory().group_md
    assert len(text) < CORE_LIMIT_CHARS + 200
    assert "truncated" in text


@pytest.mark.parametrize("key", ["../../etc:passwd", "a", ":x", "x:", "global:x", "..:..",
                                 "a:../../b"])
def test_bad_or_escaping_group_keys_never_leave_the_data_dir(tmp_path: Path, key: str) -> None:
    try:
        gd = GroupDirectory(tmp_path, key)
    except InvalidGroupKey:
        return
    root = (tmp_path / "groups").resolve()
    assert root in gd.path.parents
    assert gd.path.parent.parent == root


def test_distinct_groups_get_distinct_directories(tmp_path: Path) -> None:
    a = GroupDirectory(tmp_path, "telegram:1/2").path
    b = GroupDirectory(tmp_path, "telegram:1~2f~2").path
    assert a != b

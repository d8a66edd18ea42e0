"""The gateway reaches group directories through ``gateway.intake._groupfiles`` alone (issue 23):
no other gateway module builds a group's path or opens its memory itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gateway.intake import GroupFiles
from memory_store import InvalidGroupKey
from tests.structure.rules import ROOT

#: what builds a group's (or a person's) path or opens its memory
BUILDERS = frozenset({"GroupDirectory", "open_memory", "open_group", "group_dir", "global_dir",
                      "groups_root", "persons_root", "person_key", "memory_path",
                      "MemoryCache"})
#: the layout's folder names under the data dir
LAYOUT = ("groups", "persons")
HOME = "gateway/intake/_groupfiles.py"


def _is_layout(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        node.value.strip("/").split("/")[0] in LAYOUT


def builds_group_paths(path: Path) -> list[str]:
    """Where the module at ``path`` builds a group path itself: it calls a builder,
    imports one (but ``GroupDirectory``, fine as a type), or joins a layout folder."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memory_store"):
            found += [f"{node.lineno}: imports {a.name}" for a in node.names
                      if a.name in BUILDERS - {"GroupDirectory"}]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else ""
            if name in BUILDERS:
                found.append(f"{node.lineno}: calls {name}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and \
                (_is_layout(node.left) or _is_layout(node.right)):
            found.append(f"{node.lineno}: joins a layout folder")
    return found


def test_no_gateway_module_builds_a_group_path() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "gateway").rglob("*.py"))
             if str(p.relative_to(ROOT)) != HOME and (hits := builds_group_paths(p))}
    assert found == {}


def test_the_checker_sees_each_way(tmp_path: Path) -> None:
    ways = {"from memory_store.files._paths import group_dir\n": "imports group_dir",
            "import memory_store\nmemory_store.GroupDirectory(d, g)\n": "calls GroupDirectory",
            "x = data_dir / 'groups' / 'telegram'\n": "joins a layout folder",
            "x = data_dir / 'persons/ada'\n": "joins a layout folder"}
    for n, (code, why) in enumerate(ways.items()):
        path = tmp_path / f"m{n}.py"
        path.write_text(code)
        assert [h.split(": ", 1)[1] for h in builds_group_paths(path)] == [why]


def test_existing_reads_and_never_creates(tmp_path: Path) -> None:
    files = GroupFiles(tmp_path, "hybrid")
    assert files.existing("telegram:-100") is None
    assert not (tmp_path / "groups").exists()  # asking made nothing
    (tmp_path / "groups" / "telegram" / "-100").mkdir(parents=True)
    gd = files.existing("telegram:-100")
    assert gd is not None and gd.path == tmp_path / "groups" / "telegram" / "-100"
    with pytest.raises(InvalidGroupKey):
        files.existing("../etc")


def test_memories_are_the_chats_and_its_persons_read_only(tmp_path: Path) -> None:
    files = GroupFiles(tmp_path)
    assert files.memories("local:ann", ["person:ada"], "bob") == []
    assert not (tmp_path / "groups").exists() and not (tmp_path / "persons").exists()
    for folder in ("groups/local/ann", "persons/ada", "persons/bob"):
        (tmp_path / folder).mkdir(parents=True)
    # not a person key, or one leaving the data dir: skipped, never read
    found = files.memories("local:ann", ["person:ada", "local:crew", "person:../x"], "bob")
    assert [(k, gd.path.relative_to(tmp_path).as_posix()) for k, gd in found] == [
        ("local:ann", "groups/local/ann"), ("person:ada", "persons/ada"),
        ("person:bob", "persons/bob")]
    assert [k for k, _ in files.memories("local:ann")] == ["local:ann"]

"""No module of the four packages uses another module's private names (issue 23): a
helper two modules need is public in one of them, or in a module of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.rules import PACKAGES, ROOT, source_files


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ours(module: str) -> bool:
    return module.partition(".")[0] in PACKAGES


def private_uses(path: Path) -> list[str]:
    """``from ours import _x`` and ``ours_module._x`` in the module at ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[str] = []
    modules: set[str] = set()  # local names bound to one of our modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and _ours(node.module or ""):
            found += [f"{node.lineno}: {node.module}.{a.name}" for a in node.names
                      if _private(a.name)]
            modules |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.partition(".")[0] for a in node.names
                        if _ours(a.name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in modules and _private(node.attr):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_private_name_used_across_modules() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in source_files()
             if (hits := private_uses(p))}
    assert found == {}


def test_the_checker_sees_both_forms(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import os\nfrom gateway import cli\nfrom gateway.opscli import _client\n"
                    "def f():\n    cli._load(None)\n    os._exit(0)\n")
    assert private_uses(path) == ["3: gateway.opscli._client", "5: cli._load"]

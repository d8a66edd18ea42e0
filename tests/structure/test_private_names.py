"""No module of the four packages uses another module's private names (issue 23): a
helper two modules need is public in one of them, or in a module of its own. Nor does a
package import another package's private modules: memory_store is entered through its
front doors (``memory_store`` and its rooms' ``__init__``)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.rules import PACKAGES, ROOT, imports, source_files


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
    path.write_text("import os\nfrom gateway import cli\n"
                    "from gateway.operations._opscli import _client\n"
                    "def f():\n    cli._load(None)\n    os._exit(0)\n")
    assert private_uses(path) == ["3: gateway.operations._opscli._client", "5: cli._load"]


def _private_part(module: str) -> bool:
    return any(_private(part) for part in module.split("."))


def foreign_private_modules(root: Path = ROOT) -> list[str]:
    """Imports of another package's private module (``memory_store.files._atomic`` from
    the gateway): a package is entered through its front door (issue 23)."""
    found: list[str] = []
    for path in source_files(root):
        for imp in imports(path, root):
            if imp.module.partition(".")[0] != imp.target.partition(".")[0] and \
                    _ours(imp.target) and _private_part(imp.target):
                found.append(f"{path.relative_to(root)}:{imp.line}: {imp.target}")
    return found


def memory_store_side_doors(root: Path = ROOT) -> list[str]:
    """Imports of memory_store from the other packages that are not ``memory_store`` or
    one of its rooms' front doors (``memory_store.files``, ``memory_store.tasks``...)."""
    found: list[str] = []
    for path in source_files(root):
        for imp in imports(path, root):
            if imp.module.startswith("memory_store") or \
                    not imp.target.startswith("memory_store"):
                continue
            parts = imp.target.split(".")
            # ``from memory_store import open_memory`` reads as memory_store.open_memory:
            # a name of the front door, not a module
            door = len(parts) == 1 or (len(parts) == 2 and not (
                root / parts[0] / f"{parts[1]}.py").exists())
            if not door:
                found.append(f"{path.relative_to(root)}:{imp.line}: {imp.target}")
    return found


def test_no_private_module_of_another_package_imported() -> None:
    assert foreign_private_modules() == []


def test_memory_store_is_entered_only_through_its_front_doors() -> None:
    assert memory_store_side_doors() == []


def test_the_door_checks_see_side_doors(tmp_path: Path) -> None:
    files = {
        "memory_store/__init__.py": "", "memory_store/files/__init__.py": "",
        "memory_store/files/_atomic.py": "", "memory_store/backends/__init__.py": "",
        "memory_store/backends/file.py": "",
        # inside the package, its private modules are its own business
        "memory_store/files/_group.py": "from memory_store.files._atomic import w\n",
        "gateway/__init__.py": "",
        "gateway/ok.py": "from memory_store import open_memory\n"
                         "from memory_store.files import atomic_write_text\n",
        "gateway/bad.py": "import memory_store.files._atomic as a\n"
                          "from memory_store.backends.file import FileMemory\n",
    }
    for rel, code in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    assert foreign_private_modules(tmp_path) == ["gateway/bad.py:1: memory_store.files._atomic"]
    assert memory_store_side_doors(tmp_path) == [
        "gateway/bad.py:1: memory_store.files._atomic",
        "gateway/bad.py:2: memory_store.backends.file"]

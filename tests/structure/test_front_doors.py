"""The lazy front doors of the rooms (issue 23): every name a front door lists in its
``TYPE_CHECKING`` block is there at run time (``lazy_exports`` parses that block: a form
it missed, or a listed import that is broken, fails here), and opening the doors loads
none of the heavy libraries."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.structure.rules import ROOT, module_name, source_files

#: what ``import memory_store`` and the rooms' front doors must not load (the embedder's)
HEAVY = ("numpy", "onnxruntime", "tokenizers", "simsimd")


def front_doors() -> list[str]:
    """The packages whose ``__init__`` is a lazy front door."""
    return sorted(module_name(p) for p in source_files() if p.name == "__init__.py" and
                  "lazy_exports(" in p.read_text(encoding="utf-8"))


def listed(path: Path) -> list[str]:
    """The names a door's ``if TYPE_CHECKING:`` block binds, read here on its own (not by
    the parser under test): ``from m import x as x``, ``import m as x``, ``x = m``."""
    names: list[str] = []
    for block in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING":
            for node in block.body:
                if isinstance(node, ast.ImportFrom | ast.Import):
                    names += [a.asname or a.name for a in node.names
                              if a.asname or isinstance(node, ast.ImportFrom)]
                elif isinstance(node, ast.Assign):
                    names += [ast.unparse(t) for t in node.targets]
    return names


def missing_names(root: Path = ROOT) -> list[str]:
    missing = []
    for door in front_doors():
        module = importlib.import_module(door)
        path = root / door.replace(".", "/") / "__init__.py"
        for name in listed(path):
            try:
                getattr(module, name)
            except (AttributeError, ImportError) as e:
                missing.append(f"{door}.{name}: {e}")
    return missing


def test_every_listed_name_resolves() -> None:
    doors = front_doors()
    assert {"memory_store", "memory_store.files", "memory_store.index", "gateway.intake",
            "gateway.outgoing", "gateway.operations"} <= set(doors)
    assert sum(len(listed(ROOT / d.replace(".", "/") / "__init__.py")) for d in doors) > 100
    assert missing_names() == []


def test_a_broken_listed_name_is_seen(tmp_path: Path) -> None:
    """A door listing a name its module lacks, a module and a relative import: the lazy
    lookup raises for the broken one and resolves the others."""
    pkg = tmp_path / "doorpkg"
    pkg.mkdir()
    (pkg / "_mod.py").write_text("GOOD = 1\n")
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from memory_store import lazy_exports\n"
        "if TYPE_CHECKING:\n"
        "    import doorpkg._mod\n"
        "    from doorpkg._mod import GOOD as GOOD\n"
        "    from doorpkg._mod import GONE as GONE\n"
        "    from ._mod import GOOD as AGAIN\n"
        "    import doorpkg._mod as mod\n"
        "    alias = doorpkg._mod\n"
        "else:\n"
        "    __getattr__ = lazy_exports(__name__)\n")
    code = ("import doorpkg\n"
            "print(doorpkg.GOOD, doorpkg.AGAIN, doorpkg.mod.GOOD, doorpkg.alias.GOOD)\n"
            "for name in ('GONE', 'doorpkg', 'TYPE_CHECKING_typo'):\n"
            "    try:\n"
            "        getattr(doorpkg, name)\n"
            "    except AttributeError as e:\n"
            "        print(type(e).__name__, name)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                         capture_output=True, env={"PYTHONPATH": f"{tmp_path}:{ROOT}"}).stdout
    assert out.split("\n")[:4] == ["1 1 1 1", "AttributeError GONE",
                                   "AttributeError doorpkg", "AttributeError TYPE_CHECKING_typo"]
    assert listed(pkg / "__init__.py") == ["GOOD", "GONE", "AGAIN", "mod", "alias"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    import memory_store.files

    with pytest.raises(AttributeError, match="no_such_name"):
        getattr(memory_store.files, "no_such_name")


def test_opening_the_doors_loads_no_heavy_library() -> None:
    doors = ", ".join(d for d in front_doors() if d.startswith("memory_store"))
    code = (f"import sys, {doors}\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    assert out.split() == []

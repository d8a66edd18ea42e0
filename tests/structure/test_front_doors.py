"""The lazy front doors of the rooms (issue 23): every name a front door lists is there at
run time (mypy reads only their ``TYPE_CHECKING`` imports, so a wrong entry in the table
would pass it), and opening the doors loads none of the heavy libraries."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tests.structure.rules import ROOT, module_name, source_files

#: what ``import memory_store`` and the rooms' front doors must not load (the embedder's)
HEAVY = ("numpy", "onnxruntime", "tokenizers", "simsimd")


def front_doors() -> list[str]:
    """The packages whose ``__init__`` is a lazy front door."""
    return sorted(module_name(p) for p in source_files() if p.name == "__init__.py" and
                  "lazy_exports(" in p.read_text(encoding="utf-8"))


def test_every_listed_name_resolves() -> None:
    doors = front_doors()
    assert {"memory_store", "memory_store.files", "memory_store.index", "gateway.intake",
            "gateway.outgoing", "gateway.operations"} <= set(doors)
    missing = []
    for door in doors:
        module = importlib.import_module(door)
        missing += [f"{door}.{name}" for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


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

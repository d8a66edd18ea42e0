"""A package's front door, lazily (PEP 562): each public name is imported from its
private module on first use, so ``import memory_store`` (or one of its rooms) pulls only
what its caller uses; onnxruntime, numpy and tokenizers stay out of a process that
never embeds.

A front door lists each name once, in its ``if TYPE_CHECKING:`` block, as an explicit
re-export (``from pkg._mod import name as name``; a module as ``import pkg._mod`` then
``name = pkg._mod``, since ``import pkg._mod as name`` is no re-export under mypy
strict). The type checker reads that block; ``lazy_exports`` parses it on the first
attribute lookup and imports from it. Public as ``memory_store.lazy_exports`` so the
gateway's rooms use this one helper (memory_store imports nothing of the project).
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from typing import Any

#: a public name -> (module, attribute); an empty attribute means the module itself
Exports = dict[str, tuple[str, str]]


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` as a string, or None when ``node`` is not a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def exports_in(source: str | bytes, package: str) -> Exports:
    """The names bound by the ``if TYPE_CHECKING:`` blocks of a front door's source.
    A bare ``import a.b`` binds ``a``, only there for an assignment: not a name."""
    out: Exports = {}
    for block in ast.parse(source).body:
        if not (isinstance(block, ast.If) and _type_checking(block.test)):
            continue
        for node in block.body:
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:  # ``from ._x import y`` in an ``__init__``: 1 is the package
                    parts = package.split(".")
                    module = ".".join([*parts[: len(parts) - node.level + 1],
                                       *([module] if module else [])])
                out |= {a.asname or a.name: (module, a.name) for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.asname: (a.name, "") for a in node.names if a.asname}
            elif isinstance(node, ast.Assign) and (dotted := _dotted(node.value)):
                out |= {t.id: (dotted, "") for t in node.targets if isinstance(t, ast.Name)}
    return out


def lazy_exports(package: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``, a front door as described above."""
    table: Exports | None = None

    def __getattr__(name: str) -> Any:
        nonlocal table
        if table is None:  # once per package, on first use: the door's source is small
            origin = sys.modules[package].__file__
            if origin is None:  # a namespace package has no door to read
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            with open(origin, "rb") as f:
                table = exports_in(f.read(), package)
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attr = target
        module = importlib.import_module(module_name)
        value = getattr(module, attr) if attr else module
        setattr(sys.modules[package], name, value)  # later lookups never come back here
        return value

    return __getattr__

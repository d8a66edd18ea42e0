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

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memory_store._doorscan import Exports


def lazy_exports(package: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``, a front door as described above."""
    table: Exports | None = None

    def __getattr__(name: str) -> Any:
        nonlocal table
        if table is None:  # once per package, on first use: the door's source is small
            # imported here: ``ast`` costs a few ms a bare ``import memory_store`` need not pay
            from memory_store._doorscan import exports_in

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

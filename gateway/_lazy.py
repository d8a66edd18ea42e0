"""A package's front door, lazily (PEP 562): each public name is imported from its
private module on first use, so ``import gateway.intake`` (or another room) pulls only
what its caller uses, and the rooms import one another without cycles through their
front doors.

The front door lists its names twice: as ``TYPE_CHECKING`` imports (what mypy reads)
and as the table given here (what runs). The same helper as ``memory_store/_lazy.py``:
the gateway may not import a private module of memory_store.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``table`` maps a public name to
    ``"module:attr"``, or to ``"module:"`` when the name is that module itself."""

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, _, attr = target.partition(":")
        module = importlib.import_module(module_name)
        value = getattr(module, attr) if attr else module
        setattr(sys.modules[package], name, value)  # later lookups never come back here
        return value

    return __getattr__

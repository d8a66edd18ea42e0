"""The names a lazy front door lists: what its ``if TYPE_CHECKING:`` block binds, read
with ``ast`` (see ``memory_store/_lazy.py`` for the forms a door uses)."""

from __future__ import annotations

import ast

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

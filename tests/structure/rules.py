"""The package rules of DESIGN.md, checked on the source (an ``ast`` scan, no imports
run): who may import whom, module sizes, and how many modules read the TOML file."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("channels", "gateway", "workers", "memory_store")
MAX_NON_BLANK = 400

#: third-party modules gateway/config and gateway/queue may import (with the stdlib)
CONTRACT_THIRD_PARTY = {"pydantic", "redis", "rq"}
CONTRACT_PACKAGES = ("gateway.config", "gateway.queue")
#: what workers may import of channels: the envelope, and the pure secret redactor
WORKER_CHANNELS = ("channels.models", "channels.redact")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module, dotted (absolute)
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def imports(path: Path, root: Path = ROOT) -> list[Import]:
    """Every import in the file, ``TYPE_CHECKING`` blocks and function bodies included."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [Import(name, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.append(Import(name, target, node.lineno))
            # ``from gateway import config`` imports gateway.config
            out += [Import(name, f"{target}.{a.name}", node.lineno) for a in node.names
                    if not node.level and target in PACKAGES]
    return out


def _top(target: str) -> str:
    return target.partition(".")[0]


def _within(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def violations(root: Path = ROOT) -> list[str]:
    """One line per broken rule; empty when the rules hold."""
    stdlib = set(sys.stdlib_module_names)
    bad: list[str] = []
    for path in source_files(root):
        for imp in imports(path, root):
            src, tgt, top = imp.module, imp.target, _top(imp.target)
            where = f"{path.relative_to(root)}:{imp.line}: {src} imports {tgt}"
            if _within(src, CONTRACT_PACKAGES):
                own = _within(tgt, (_top_two(src),)) or tgt == "gateway"
                if not (own or top in stdlib or top in CONTRACT_THIRD_PARTY
                        or top == "__future__"):
                    bad.append(f"{where} (gateway/config and gateway/queue import only "
                               "pydantic, redis, rq and themselves)")
            if src.startswith("memory_store") and top in ("channels", "gateway", "workers"):
                bad.append(f"{where} (memory_store imports nothing of the project)")
            if src.startswith("channels") and top in ("gateway", "workers", "memory_store"):
                bad.append(f"{where} (channels/ is a leaf)")
            if src.startswith("gateway") and top == "workers":
                bad.append(f"{where} (the gateway never imports workers)")
            if src.startswith("workers"):
                if top == "gateway" and tgt != "gateway" and \
                        not _within(tgt, CONTRACT_PACKAGES):
                    bad.append(f"{where} (workers import only gateway.config and "
                               "gateway.queue of the gateway)")
                if top == "channels" and tgt != "channels" and \
                        not _within(tgt, WORKER_CHANNELS):
                    bad.append(f"{where} (workers import only {', '.join(WORKER_CHANNELS)} "
                               "of channels: never a platform adapter)")
    return bad


def _top_two(module: str) -> str:
    return ".".join(module.split(".")[:2])


def module_sizes() -> dict[str, int]:
    """Non-blank lines of every module of the four packages."""
    return {str(p.relative_to(ROOT)): sum(1 for line in p.read_text(encoding="utf-8")
                                          .splitlines() if line.strip())
            for p in source_files()}


def toml_loaders() -> list[str]:
    """Modules that parse TOML (``tomllib.load``/``loads``)."""
    found: list[str] = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("load", "loads") and \
                    isinstance(node.value, ast.Name) and node.value.id in ("tomllib", "tomli"):
                found.append(str(path.relative_to(ROOT)))
    return sorted(set(found))

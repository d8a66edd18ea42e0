"""No module-level import cycle in gateway/, channels/, workers/, memory_store/ (issue 23)."""

from __future__ import annotations

from pathlib import Path

from tests.structure.cycles import cycles, import_graph


def test_no_module_level_import_cycle() -> None:
    assert cycles(import_graph()) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, code in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)


def test_the_checker_finds_cycles_and_only_module_level_ones(tmp_path: Path) -> None:
    _write(tmp_path, {
        # the shape discord had: the front door imports channel, channel imports from
        # the half-done front door
        "channels/__init__.py": "",
        "channels/d/__init__.py": "from channels.d.channel import C\n",
        "channels/d/channel.py": "from channels.d import endpoint\nclass C: ...\n",
        "channels/d/endpoint.py": "",
        # a cycle through a relative import and a plain ``import``
        "gateway/__init__.py": "",
        "gateway/a.py": "from . import b\n",
        "gateway/b.py": "import gateway.a\n",
        # only in a function or for the type checker: not cycles
        "workers/__init__.py": "",
        "workers/x.py": "from workers import y\n",
        "workers/y.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from workers import x\ndef f():\n    from workers import x\n"),
        # submodules importing each other under a re-exporting front door: fine
        "memory_store/__init__.py": "from memory_store.m import M\n",
        "memory_store/m.py": "from memory_store.n import N\nclass M: ...\n",
        "memory_store/n.py": "class N: ...\n",
    })
    assert cycles(import_graph(tmp_path)) == [["channels.d", "channels.d.channel"],
                                              ["gateway.a", "gateway.b"]]

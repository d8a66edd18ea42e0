"""The leaf packages (``channels``, ``memory_store``) read no environment variable:
what they need comes from their caller (secrets through the ``env`` mapping the
gateway hands ``from_config``, the rest through ``ChannelContext`` or a parameter),
and every variable the project reads is named in ``gateway/config/env.py``."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.rules import ROOT

LEAVES = ("channels", "memory_store")
#: ``os`` names that read the process environment
READERS = {"environ", "environb", "getenv", "getenvb"}


def env_reads(root: Path = ROOT) -> list[str]:
    """``path:line name`` of every read of the process environment in the leaves."""
    found: list[str] = []
    for leaf in LEAVES:
        for path in sorted((root / leaf).rglob("*.py")):
            rel = path.relative_to(root)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr in READERS:
                    found.append(f"{rel}:{node.lineno} .{node.attr}")
                elif isinstance(node, ast.ImportFrom) and node.module == "os":
                    found += [f"{rel}:{node.lineno} from os import {a.name}"
                              for a in node.names if a.name in READERS]
    return found


def test_leaf_packages_read_no_environment_variable() -> None:
    assert env_reads() == []


def test_the_check_sees_each_way_of_reading_the_environment(tmp_path: Path) -> None:
    (tmp_path / "channels" / "x").mkdir(parents=True)
    (tmp_path / "memory_store").mkdir()
    (tmp_path / "channels" / "x" / "a.py").write_text(
        "import os\nDIR = os.environ.get('PYNANOCLAW_DATA_DIR')\n")
    (tmp_path / "memory_store" / "b.py").write_text(
        "import os\nfrom os import getenv\nN = os.getenv('N')\nM = getenv('M')\n")
    assert sorted(env_reads(tmp_path)) == [
        "channels/x/a.py:2 .environ",
        "memory_store/b.py:2 from os import getenv",
        "memory_store/b.py:3 .getenv",
    ]

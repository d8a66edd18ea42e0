"""deploy/install-local-model.sh keeps the llama.cpp wheel it compiled, keyed by version,
Python, platform and CMAKE_ARGS: a second install with the same key does not compile, a
different CMAKE_ARGS does, and a native build is never handed out for the portable key.

Real pip, offline: the "index" is a find-links directory holding a fake
llama-cpp-python sdist whose PEP 517 build backend (in-tree, no build requirements)
logs every wheel build with the CMAKE_ARGS it saw, instead of running cmake.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pip
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "install-local-model.sh"
VERSION = "0.3.99"
PORTABLE = "-DGGML_NATIVE=OFF"

_BACKEND = """
import base64, hashlib, os, zipfile

NAME, VERSION = "llama_cpp_python", "{version}"
DIST_INFO = f"{{NAME}}-{{VERSION}}.dist-info"
METADATA = f"Metadata-Version: 2.1\\nName: llama-cpp-python\\nVersion: {{VERSION}}\\n"
WHEEL = "Wheel-Version: 1.0\\nGenerator: fake\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    path = os.path.join(metadata_directory, DIST_INFO)
    os.makedirs(path)
    for name, text in (("METADATA", METADATA), ("WHEEL", WHEEL)):
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
    return DIST_INFO


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    cmake_args = os.environ.get("CMAKE_ARGS", "")
    with open(os.environ["FAKE_BUILD_LOG"], "a") as log:
        log.write(cmake_args + "\\n")
    files = {{
        "llama_cpp/__init__.py": f"CMAKE_ARGS = {{cmake_args!r}}\\n",
        f"{{DIST_INFO}}/METADATA": METADATA,
        f"{{DIST_INFO}}/WHEEL": WHEEL,
    }}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest())
        record.append(f"{{name}},sha256={{digest.rstrip(b'=').decode()}},{{len(text)}}")
    record.append(f"{{DIST_INFO}}/RECORD,,")
    files[f"{{DIST_INFO}}/RECORD"] = "\\n".join(record) + "\\n"
    wheel = f"{{NAME}}-{{VERSION}}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel
"""

_PYPROJECT = """[build-system]
requires = []
build-backend = "fake_backend"
backend-path = ["."]
"""


def _write_sdist(links: Path) -> None:
    top = f"llama_cpp_python-{VERSION}"
    members = {
        "pyproject.toml": _PYPROJECT,
        "fake_backend.py": _BACKEND.format(version=VERSION),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: llama-cpp-python\nVersion: {VERSION}\n",
    }
    links.mkdir()
    with tarfile.open(links / f"{top}.tar.gz", "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def offline(tmp_path: Path) -> dict[str, str]:
    """Environment for pip with only the fake sdist to find, and a private cache."""
    _write_sdist(tmp_path / "links")
    only_pip = tmp_path / "only-pip"
    only_pip.mkdir()
    (only_pip / "pip").symlink_to(Path(pip.__file__).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "CMAKE_ARGS"))}
    env.pop("PNC_WHEEL_CACHE", None)
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,  # no machine-wide index, find-links or constraints
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "links"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "FAKE_BUILD_LOG": str(tmp_path / "builds.log"),
        # this interpreter's pip alone (llama_cpp and the rest stay invisible), so the
        # new virtualenvs need no ensurepip, which costs seconds for the same pip
        "PYTHONPATH": str(only_pip),
    }


def _install(tmp_path: Path, env: dict[str, str], cmake_args: str | None = None) -> str:
    """Run the script into a new, empty virtualenv (as a fresh CI clone does), then return
    the CMAKE_ARGS the installed build was made with."""
    venv = Path(tempfile.mkdtemp(dir=tmp_path, prefix="venv-"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    run_env = dict(env) if cmake_args is None else {**env, "CMAKE_ARGS": cmake_args}
    subprocess.run(["bash", str(SCRIPT), str(python)], check=True, env=run_env, timeout=300)
    installed = subprocess.run(
        [str(python), "-c", "import llama_cpp; print(llama_cpp.CMAKE_ARGS)"],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    return installed.stdout.strip()


def _builds(env: dict[str, str]) -> list[str]:
    log = Path(env["FAKE_BUILD_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def test_a_second_install_reuses_the_wheel_and_cmake_args_are_part_of_the_key(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    first = _install(tmp_path, offline)
    assert PORTABLE in first  # the default stays the portable build
    assert _builds(offline) == [first]

    assert _install(tmp_path, offline) == first
    assert _builds(offline) == [first], "the same key compiled again"
    slots = list((tmp_path / "cache" / "pynanoclaw" / "wheels").glob("llama-cpp-python-*"))
    assert [s.name.startswith(f"llama-cpp-python-{VERSION}-") for s in slots] == [True]
    assert (slots[0] / "cmake-args.txt").read_text().strip() == first

    native = "-DGGML_NATIVE=ON"
    assert _install(tmp_path, offline, native) == native
    assert _builds(offline) == [first, native], "other CMAKE_ARGS must build their own"
    # each build in its own slot: the portable key never gets the native wheel
    kept = sorted(
        (s / "cmake-args.txt").read_text().strip() for s in slots[0].parent.iterdir() if s.is_dir()
    )
    assert kept == sorted([first, native])

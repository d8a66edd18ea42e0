#!/usr/bin/env bash
# Installs the local model's runtime, llama-cpp-python, into a virtualenv, compiled so
# that it runs on any CPU of its architecture. Used by deploy/quickstart.sh and .ci/run.
#
# Why a source build: no portable prebuilt llama.cpp wheel is published on PyPI
# (llama-cpp-python ships an sdist only; the prebuilt ones found need glibc 2.38, or
# x86-64 Linux only). GGML_NATIVE=OFF builds for the architecture's baseline (x86-64
# with AVX2/FMA, arm64) instead of every flag of the build machine; a native build
# picked AVX-512/AMX and died with SIGILL where the CPU or the OS does not run them.
# No runtime CPU-variant dispatch (it may choose AMX where the OS does not enable it).
# LLAVA_BUILD=OFF skips the image library the chat does not use.
# --no-cache-dir: pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS, so a
# native build cached earlier would silently be reused.
#
# Usage: bash deploy/install-local-model.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail
PY=${1:-.venv/bin/python}
if "$PY" -c "import llama_cpp" 2>/dev/null; then
  exit 0
fi
echo "compiling llama.cpp for the local model (once per virtualenv; about 5 minutes" \
     "on 2 cores) ..." >&2
CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"} \
  "$PY" -m pip install --quiet --no-cache-dir "llama-cpp-python>=0.3,<0.4"

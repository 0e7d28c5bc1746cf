#!/usr/bin/env bash
# Creates the virtual environment (.venv, or $NEURALOPS_VENV) from requirements.txt and builds and
# installs neuralops into it. Sourced by scripts/test.sh and scripts/demo.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${NEURALOPS_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  # The pinned torch is a CUDA build: the new venv takes about 6 GB (with the build, 6.1 GB seen).
  # A full disk otherwise shows only as pip's "No space left on device" halfway through.
  mkdir -p "$(dirname "$VENV")"
  free_mb=$(df -Pm "$(dirname "$VENV")" | awk 'NR == 2 {print $4}')
  if [ "${free_mb:-0}" -lt 7000 ]; then
    echo "[neuralops] warning: ${free_mb} MB free under $(dirname "$VENV"); the venv needs about 6000 MB" >&2
  fi
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -qq -r "$ROOT/requirements.txt"
export PATH="$VENV/bin:$PATH"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
start=$(date +%s)
"$VENV/bin/python" -m pip install -qq --no-build-isolation --no-deps "$ROOT"
echo "[neuralops] built and installed in $(( $(date +%s) - start )) s"

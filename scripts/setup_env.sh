#!/usr/bin/env bash
# Creates the virtual environment (.venv, or $NEURALOPS_VENV) from requirements.txt and builds and
# installs neuralops into it. Sourced by scripts/test.sh and scripts/demo.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${NEURALOPS_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -qq -r "$ROOT/requirements.txt"
export PATH="$VENV/bin:$PATH"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
start=$(date +%s)
"$VENV/bin/python" -m pip install -qq --no-build-isolation --no-deps "$ROOT"
echo "[neuralops] built and installed in $(( $(date +%s) - start )) s"

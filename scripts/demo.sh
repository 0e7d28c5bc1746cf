#!/usr/bin/env bash
# The README's demo command: set up the venv, build neuralops, run the demo (on the GPU when there
# is one, else on the PyTorch fallbacks). Extra arguments go to the demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# -P: import the installed package (it has the compiled library), not the checkout's neuralops/.
"$VENV/bin/python" -P -m neuralops.demo "$@"

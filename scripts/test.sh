#!/usr/bin/env bash
# The README's test command: set up the venv, build neuralops, run the test suite.
# GPU tests run when a CUDA GPU is present and are skipped otherwise. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
"$VENV/bin/pytest" tests -q -rs "$@"

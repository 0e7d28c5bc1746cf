#!/usr/bin/env bash
# Everything for one lease of the GPU machine, in one call: build neuralops there, print build info,
# run the whole test suite (GPU tests included) and the benchmarks. Full logs go to $OUT; the short
# summary is printed last. Usage (on the GPU machine, from the repository root):
#   OUT=/tmp/out bash benchmarks/run_gpu.sh [ops to benchmark, default: all]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/neuralops-gpu}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
PY=python3
cd "$ROOT"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
start=$(date +%s)
if ! $PY -m pip install --no-build-isolation --no-deps -v . > "$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
grep "\[neuralops aot\] .* kernels:" "$OUT/build.log" | tail -1
# Run the installed package from a neutral directory: from the root, python -m would import the checkout.
(cd "$OUT" && $PY -m neuralops.info) | tee "$OUT/info.txt"
(cd "$OUT" && $PY -c "
import torch, neuralops
try:
    torch.ops.neuralops.gqa_fwd(torch.randn(1, 3, 4, 8), torch.randn(1, 3, 4, 8), 3, 8)
except ValueError as e:
    print('C++ exceptions reach Python:', e)") || echo "C++ EXCEPTION CRASHED THE PROCESS"
tests_rc=0
for part in tests/gpu tests/cpu; do
  $PY -m pytest "$part" -q -rs --durations=10 -p no:cacheprovider > "$OUT/$(basename $part)-tests.log" 2>&1 || tests_rc=1
  echo "$part: $(grep -E '(passed|failed|error)' "$OUT/$(basename $part)-tests.log" | tail -1)"
done
$PY -m pytest tests/gpu/test_runtime_gpu.py -q -s -k latency -p no:cacheprovider 2>&1 | grep "first call" || true
if [ $tests_rc -ne 0 ]; then grep -E "^(FAILED|ERROR)|Error|error:" "$OUT"/*-tests.log | head -40; fi
(cd "$OUT" && $PY -m neuralops.bench "$@" --json "$OUT/bench.json" --markdown "$OUT/bench.md") > "$OUT/bench.log" 2>&1 || tail -40 "$OUT/bench.log"
cat "$OUT/bench.md"
exit $tests_rc

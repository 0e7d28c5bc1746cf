#!/usr/bin/env bash
# Everything for one lease of the GPU machine, in one call: build neuralops there, run the GPU tests,
# the benchmarks and the C++ package test (the example on CUDA). Each step has a time limit and
# writes its log under $OUT as it goes, so a lease that runs short still returns what finished.
# Usage (on the GPU machine, from the repository root):
#   OUT=/tmp/out bash benchmarks/run_gpu.sh [--quick] [ops to benchmark, default: all]
# The CPU test suite runs in CI; NEURALOPS_GPU_RUN_CPU_TESTS=1 runs it here too. NEURALOPS_GPU_E2E=1 adds
# the end-to-end model benchmark (python -m neuralops.bench.e2e --quick) and the demo.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/neuralops-gpu}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
PY=python3
cd "$ROOT"
step() { echo "== $1 ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/info.txt"
step "build"
start=$(date +%s)
if ! timeout 200 $PY -m pip install --no-build-isolation --no-deps -v . > "$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - start )) s; $(grep '\[neuralops aot\] .* kernels:' "$OUT/build.log" | tail -1)"
# The installed package runs from a neutral directory: from the root, python -m imports the checkout.
(cd "$OUT" && $PY -m neuralops.info) | tee -a "$OUT/info.txt"
(cd "$OUT" && $PY -c "
import torch, neuralops
try:
    torch.ops.neuralops.gqa_fwd(torch.randn(1, 3, 4, 8), torch.randn(1, 3, 4, 8), 3, 8)
except ValueError as e:
    print('C++ exceptions reach Python:', e)") | tee -a "$OUT/info.txt" || echo "C++ EXCEPTION CRASHED THE PROCESS"

step "GPU tests"
timeout 240 $PY -m pytest tests/gpu -q -rfEs --durations=10 -p no:cacheprovider > "$OUT/tests-gpu.log" 2>&1
tests_rc=$?
tail -1 "$OUT/tests-gpu.log"
grep -E "^(FAILED|ERROR)" "$OUT/tests-gpu.log" | head -20

step "benchmarks"
(cd "$OUT" && timeout 240 $PY -m neuralops.bench "$@" --json "$OUT/bench.json" --markdown "$OUT/bench.md") \
  > "$OUT/bench.log" 2>&1 || tail -30 "$OUT/bench.log"
(cd "$OUT" && timeout 40 $PY -m neuralops.bench.linear_attn --startup) | tee -a "$OUT/info.txt"

if [ "${NEURALOPS_GPU_E2E:-0}" = 1 ]; then
  step "end-to-end model benchmark"
  (cd "$OUT" && timeout 300 $PY -m neuralops.bench.e2e --quick --json "$OUT/e2e.json" --markdown "$OUT/e2e.md") \
    > "$OUT/e2e.log" 2>&1 || tail -30 "$OUT/e2e.log"
  cat "$OUT/e2e.md" 2>/dev/null
  step "demo"
  (cd "$OUT" && timeout 240 $PY -m neuralops.demo --out "$OUT/demo") > "$OUT/demo.log" 2>&1 || echo "DEMO FAILED"
  tail -25 "$OUT/demo.log"
fi

step "C++ package (CMake install, examples/cpp on CPU and CUDA)"
timeout 120 $PY -m pytest tests/cpu/test_cpp_package.py -q -s -p no:cacheprovider > "$OUT/tests-cpp.log" 2>&1 || tests_rc=1
grep -E "^1: +(ok|FAIL)|all passed|FAILED|passed|failed" "$OUT/tests-cpp.log" | tail -40
if [ "${NEURALOPS_GPU_RUN_CPU_TESTS:-0}" = 1 ]; then
  step "CPU tests"
  $PY -m pytest tests/cpu -q -rs -p no:cacheprovider > "$OUT/tests-cpu.log" 2>&1 || tests_rc=1
  tail -1 "$OUT/tests-cpu.log"
fi
step "done"
cat "$OUT/bench.md" 2>/dev/null
exit $tests_rc

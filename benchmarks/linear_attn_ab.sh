#!/usr/bin/env bash
# Two builds of neuralops side by side in one GPU lease: the working tree (installed as usual) and
# another tree (OLD, e.g. `git archive <commit> | tar -x -C <dir>`, installed with --target into
# /tmp/old_site), then the GPU tests on the new build, the per-kernel timeline of the new build's
# causal forwards, both builds' per-kernel times (benchmarks/linear_attn_kernels.py), and the
# linear-attention calls of both builds in alternation, two rounds (results/linear_attn.md,
# eighteenth and nineteenth sessions). AOT output may be carried for either tree.
# Usage (on the GPU machine, from the repository root):
#   OLD=<dir> [NEW_AOT=<dir>] [OLD_AOT=<dir>] [KERNEL_CASES="f64 fb128s"] [CALL_CASES="fp16 D64"] \
#     [TESTS="odd_shapes or states"] OUT=/tmp/out bash benchmarks/linear_attn_ab.sh
# (CALL_CASES: linear_attn_calls.py's name filters, all cases without it; TESTS: a pytest -k
# expression for the GPU tests, "none" to skip them, all without it. A lease's start-up takes about
# 100 s of device time, so the filters fit an A/B into what a session has left.)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/neuralops-ab}"
OLD="$(cd "${OLD:?OLD must name the other tree}" && pwd)"
mkdir -p "$OUT"
# A benchmark that outlives its limit gets SIGABRT, on which faulthandler prints where each thread
# stood. In the twenty-sixth session benchmark processes hung on the H200 (in one call each after the
# first two, in another all of them) while pytest ran normally, and TERM left no trace of where.
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 NEURALOPS_CUDA_ARCHS="${NEURALOPS_CUDA_ARCHS:-90}"
cd "$ROOT"
( NEURALOPS_BUILD_DIR=/tmp/bld_new NEURALOPS_AOT_PREBUILT="${NEW_AOT:-}" timeout 250 \
    python3 -m pip install --no-build-isolation --no-deps . > "$OUT/build_new.log" 2>&1 || echo "NEW BUILD FAILED" ) &
( cd "$OLD" && NEURALOPS_BUILD_DIR=/tmp/bld_old NEURALOPS_AOT_PREBUILT="${OLD_AOT:-}" timeout 250 \
    python3 -m pip install --no-build-isolation --no-deps --target /tmp/old_site . > "$OUT/build_old.log" 2>&1 \
    || echo "OLD BUILD FAILED" ) &
wait
if [ "${TESTS:-}" != none ]; then
  echo "== GPU tests (new build)"
  timeout 300 python3 -m pytest tests/gpu -q -rfEs -p no:cacheprovider ${TESTS:+-k "$TESTS"} > "$OUT/tests-gpu.log" 2>&1
  tail -3 "$OUT/tests-gpu.log"
  grep -E "^(FAILED|ERROR)" "$OUT/tests-gpu.log" | head -20
fi
cd /tmp  # the installed packages, not the checkout
echo "== kernels of causal forwards (new build)"
for shape in "4 16 4096 64" "1 16 65536 128" "4 16 2048 128"; do
  echo "-- B H N D = $shape"
  timeout -s ABRT 60 python3 "$ROOT/benchmarks/linear_attn_timeline.py" $shape 2>&1 | grep -v -i warn | tail -4
done
# Per-kernel device times of both builds (benchmarks/linear_attn_kernels.py cases; KERNEL_CASES).
for build in old new; do
  echo "== kernels per call, $build build"
  site=$([ "$build" = old ] && echo /tmp/old_site || echo "")
  PYTHONPATH="$site" timeout -s ABRT 200 python3 "$ROOT/benchmarks/linear_attn_kernels.py" ${KERNEL_CASES:-f64 f128L fb128s fb128L} \
    2>&1 | grep -v -i warn | tee "$OUT/kernels_$build.txt"
done
for round in 1 2; do
  echo "== calls, old build (round $round)"
  PYTHONPATH=/tmp/old_site timeout -s ABRT 200 python3 "$ROOT/benchmarks/linear_attn_calls.py" ${CALL_CASES:-} 2>&1 | tee "$OUT/calls_old_$round.txt"
  echo "== calls, new build (round $round)"
  timeout -s ABRT 200 python3 "$ROOT/benchmarks/linear_attn_calls.py" ${CALL_CASES:-} 2>&1 | tee "$OUT/calls_new_$round.txt"
done

#!/usr/bin/env bash
# Builds of neuralops side by side in one GPU lease: the working tree (installed as usual), another
# tree (OLD, e.g. `git archive <commit> | tar -x -C <dir>`, installed with --target into
# /tmp/old_site) and, with NEW2_AOT, the working tree again with another AOT output (other tiles,
# into /tmp/new2_site). Then the GPU tests on each new build, the per-kernel timeline of the new
# build's causal forwards, every build's per-kernel times (benchmarks/linear_attn_kernels.py), and
# the linear-attention calls of every build in alternation, two rounds (results/linear_attn.md,
# eighteenth, nineteenth and fortieth sessions). AOT output may be carried for each tree.
# Usage (on the GPU machine, from the repository root):
#   OLD=<dir> [NEW_AOT=<dir>] [OLD_AOT=<dir>] [NEW2_AOT=<dir>] [KERNEL_CASES="f64 fb128s"] \
#     [CALL_CASES="fp16 D64"] [TESTS="odd_shapes or states"] [TIMELINE=none] OUT=/tmp/out \
#     bash benchmarks/linear_attn_ab.sh
# (CALL_CASES: linear_attn_calls.py's name filters, all cases without it; TESTS: a pytest -k
# expression for the GPU tests, "none" to skip them, all without it (TESTS_TIMEOUT seconds, 300
# by default); TIMELINE=none skips the causal timelines; KERNEL_CASES=none and ROUNDS=none skip the
# per-kernel times and the calls; BUILD=none reuses the builds of an earlier call on the same warm
# machine, so one A/B can be split over two calls that each fit the per-call limit. A lease's
# start-up takes about 100 s of device time, so the filters fit an A/B into what a session has left.)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/neuralops-ab}"
OLD="$(cd "${OLD:?OLD must name the other tree}" && pwd)"
mkdir -p "$OUT"
# A warm machine keeps /tmp between calls, and a CMake build directory configured from another tree
# fails to configure (forty-first session): every build starts clean.
[ "${BUILD:-}" = none ] || rm -rf /tmp/bld_new /tmp/bld_old /tmp/bld_new2 /tmp/old_site /tmp/new2_site /tmp/new2_tree
# A benchmark that outlives its limit gets SIGABRT, on which faulthandler prints where each thread
# stood. In the twenty-sixth session benchmark processes hung on the H200 (in one call each after the
# first two, in another all of them) while pytest ran normally, and TERM left no trace of where.
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 NEURALOPS_CUDA_ARCHS="${NEURALOPS_CUDA_ARCHS:-90}"
cd "$ROOT"
# Each build's site on PYTHONPATH ("" for the new build, installed as usual).
declare -A SITE=([old]=/tmp/old_site [new]="")
BUILDS="old new"
if [ "${BUILD:-}" != none ]; then
( NEURALOPS_BUILD_DIR=/tmp/bld_new NEURALOPS_AOT_PREBUILT="${NEW_AOT:-}" timeout 250 \
    python3 -m pip install --no-build-isolation --no-deps . > "$OUT/build_new.log" 2>&1 || echo "NEW BUILD FAILED" ) &
( cd "$OLD" && NEURALOPS_BUILD_DIR=/tmp/bld_old NEURALOPS_AOT_PREBUILT="${OLD_AOT:-}" timeout 250 \
    python3 -m pip install --no-build-isolation --no-deps --target /tmp/old_site . > "$OUT/build_old.log" 2>&1 \
    || echo "OLD BUILD FAILED" ) &
if [ -n "${NEW2_AOT:-}" ]; then
  # From a copy of the tree: pip builds in the tree it installs, and the new build runs beside it.
  new2_aot="$(cd "$NEW2_AOT" && pwd)"
  mkdir -p /tmp/new2_tree && tar -C "$ROOT" --exclude=./.carry -cf - . | tar -C /tmp/new2_tree -xf -
  ( cd /tmp/new2_tree && NEURALOPS_BUILD_DIR=/tmp/bld_new2 NEURALOPS_AOT_PREBUILT="$new2_aot" timeout 250 \
      python3 -m pip install --no-build-isolation --no-deps --target /tmp/new2_site . > "$OUT/build_new2.log" 2>&1 \
      || echo "NEW2 BUILD FAILED" ) &
fi
wait
fi
if [ -n "${NEW2_AOT:-}" ]; then
  SITE[new2]=/tmp/new2_site
  BUILDS="old new new2"
fi
if [ "${TESTS:-}" != none ]; then
  for build in ${BUILDS#old }; do
    echo "== GPU tests ($build build)"
    PYTHONPATH="${SITE[$build]}" timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest tests/gpu -q -rfEs -p no:cacheprovider \
      ${TESTS:+-k "$TESTS"} > "$OUT/tests-gpu_$build.log" 2>&1
    tail -3 "$OUT/tests-gpu_$build.log"
    grep -E "^(FAILED|ERROR)" "$OUT/tests-gpu_$build.log" | head -20
  done
fi
cd /tmp  # the installed packages, not the checkout
if [ "${TIMELINE:-}" != none ]; then
  echo "== kernels of causal forwards (new build)"
  for shape in "4 16 4096 64" "1 16 65536 128" "4 16 2048 128"; do
    echo "-- B H N D = $shape"
    timeout -s ABRT 60 python3 "$ROOT/benchmarks/linear_attn_timeline.py" $shape 2>&1 | grep -v -i warn | tail -4
  done
fi
# Per-kernel device times of every build (benchmarks/linear_attn_kernels.py cases; KERNEL_CASES).
[ "${KERNEL_CASES:-}" = none ] || for build in $BUILDS; do
  echo "== kernels per call, $build build"
  PYTHONPATH="${SITE[$build]}" timeout -s ABRT 200 python3 "$ROOT/benchmarks/linear_attn_kernels.py" \
    ${KERNEL_CASES:-f64 f128L fb128s fb128L} 2>&1 | grep -v -i warn | tee "$OUT/kernels_$build.txt"
done
[ "${ROUNDS:-}" = none ] || for round in ${ROUNDS:-1 2}; do
  for build in $BUILDS; do
    echo "== calls, $build build (round $round)"
    PYTHONPATH="${SITE[$build]}" timeout -s ABRT 200 python3 "$ROOT/benchmarks/linear_attn_calls.py" ${CALL_CASES:-} \
      2>&1 | tee "$OUT/calls_${build}_$round.txt"
  done
done

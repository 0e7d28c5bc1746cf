#!/usr/bin/env bash
# The bidirectional forward at 256 and 512 features, builds side by side in one short lease: OLD
# (another tree with its AOT output OLD_AOT) and this tree with NEW_AOT, all installed with
# --target. Each new build's correctness against float64 (benchmarks/linear_attn_bidir_check.py),
# every build's kernels (b256 bc128 bc256) and its bidirectional calls (the D256 fwd+bwd too), two
# rounds in alternation with the GPU tests on each new build between them (TESTS: a pytest -k
# expression, "none" to skip them).
# Usage (GPU machine, repository root; AOT outputs from `python -m triton_src.aot --out DIR --archs 90`):
#   OLD=<dir> OLD_AOT=<dir> NEW_AOT=<dir> [NEW2_AOT=<dir>] [TESTS=<expr>] OUT=/tmp/out \
#     bash benchmarks/linear_attn_bidir_ab.sh
# (NEW2_AOT: this tree built with other tiles, timed as a third build.)
set -uo pipefail
R="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/neuralops-bidir-ab}"
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 NEURALOPS_CUDA_ARCHS=90
nvidia-smi --query-gpu=name --format=csv,noheader
install() {  # tree aot site
  ( cd "$1" && NEURALOPS_BUILD_DIR=/tmp/bld_$3 NEURALOPS_AOT_PREBUILT="$2" timeout 240 \
    python3 -m pip install --no-build-isolation --no-deps --target /tmp/$3 . > "$OUT/build_$3.log" 2>&1 || echo "BUILD $3 FAILED" )
}
SECONDS=0
install "${OLD:?}" "${OLD_AOT:?}" site_old &
install "$R" "${NEW_AOT:?}" site_new &
BUILDS="old new"
if [ -n "${NEW2_AOT:-}" ]; then  # this tree with other tiles: a third build, from a copy (pip builds in the tree)
  mkdir -p /tmp/tree_new2 && tar -C "$R" --exclude=./.carry -cf - . | tar -C /tmp/tree_new2 -xf -
  install /tmp/tree_new2 "$(cd "$NEW2_AOT" && pwd)" site_new2 &
  BUILDS="old new new2"
fi
wait
echo "builds: $SECONDS s"
cd /tmp  # the installed packages, not the checkout
for build in ${BUILDS#old }; do
  echo "== check, $build build"
  PYTHONPATH=/tmp/site_$build timeout 60 python3 "$R/benchmarks/linear_attn_bidir_check.py" 2>&1 | tail -6
done
for build in $BUILDS; do
  echo "== kernels, $build build"
  PYTHONPATH=/tmp/site_$build timeout -s ABRT 60 python3 "$R/benchmarks/linear_attn_kernels.py" b256 bc128 bc256 2>&1 \
    | grep -v -i warn | tee "$OUT/kernels_$build.txt"
done
calls() {  # round
  for build in $BUILDS; do
    echo "== calls, $build build (round $1)"
    PYTHONPATH=/tmp/site_$build timeout -s ABRT 60 python3 "$R/benchmarks/linear_attn_calls.py" \
      "bidirectional fwd B4 H16 N4096 D256" "bidirectional fwd cosformer" "bidirectional fwd+bwd" 2>&1 \
      | tee "$OUT/calls_${build}_$1.txt"
  done
}
calls 1
if [ "${TESTS:-}" != none ]; then
  for build in ${BUILDS#old }; do
    echo "== GPU tests, $build build"
    PYTHONPATH=/tmp/site_$build timeout 220 python3 -m pytest "$R/tests/gpu" -q -rfEs -p no:cacheprovider \
      ${TESTS:+-k "$TESTS"} > "$OUT/tests-gpu_$build.log" 2>&1
    tail -1 "$OUT/tests-gpu_$build.log"
    grep -E "^(FAILED|ERROR)" "$OUT/tests-gpu_$build.log" | head -20
  done
fi
calls 2  # after the tests: a lease that runs short keeps them
echo "total: $SECONDS s"

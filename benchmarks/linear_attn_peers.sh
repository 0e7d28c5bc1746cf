#!/usr/bin/env bash
# neuralops' causal linear attention and fla-core's chunk_linear_attn (+ SDPA where it fits) in one
# run, at the issue's shapes (neuralops/bench/linear_attn.py cases; the harness, L2 flushed,
# medians). fla's first calls compile and autotune for minutes (the thirteenth session's N65536 D128
# fwd+bwd took 420 s; its compile cache holds thousands of files, too many to bring back from a
# lease), so each case prints its own rows as it finishes (a lease that ends mid-run keeps them),
# and the whole table comes once, last.
# Usage (on the GPU machine, from the repository root; the wheel from
# `pip download --no-deps fla-core==0.6.0 -d <dir>`):
#   FLA_WHEELS=<dir> [NEURALOPS_AOT_PREBUILT=<dir>] OUT=/tmp/out \
#     bash benchmarks/linear_attn_peers.sh "fwd 4 16 4096 64" "fwd_bwd 1 16 65536 128" ...
#   [NO_BUILD=1] ... (a later call on the same warm machine: no build, no install)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/neuralops-peers}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1 NEURALOPS_CUDA_ARCHS="${NEURALOPS_CUDA_ARCHS:-90}"
cd "$ROOT"
# NO_BUILD=1 on a machine that a previous call left with both packages installed: fla's compile of
# a large case can take most of one call's limit by itself.
if [ "${NO_BUILD:-0}" != 1 ]; then
  timeout 250 python3 -m pip install --no-build-isolation --no-deps . > "$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  python3 -m pip install --no-deps --no-index "${FLA_WHEELS:?FLA_WHEELS must name the wheel directory}"/fla_core-*.whl \
    > "$OUT/fla.log" 2>&1 || { tail -5 "$OUT/fla.log"; echo "FLA INSTALL FAILED"; exit 1; }
fi
cd /tmp  # the installed package, not the checkout
python3 -u - "$@" <<'EOF' 2>&1 | grep --line-buffered -v -i warn | tee "$OUT/peers.txt"
import sys, time
import torch
from neuralops.bench import harness, timing, linear_attn as b

t = timing.Timer(warmup=3, reps=20)
bandwidth, rate = timing.copy_bandwidth(t), timing.matmul_rate(t)
print(f"{torch.cuda.get_device_name()}; copy {bandwidth / 1e12:.2f} TB/s, bf16 matmul {rate / 1e12:.0f} TFLOP/s")
rows = []
for spec in sys.argv[1:]:
    kind, *shape = spec.split()
    start = time.time()
    case = {"fwd": b._causal_fwd, "fwd_bwd": b._causal_fwd_bwd}[kind](*map(int, shape))
    new = harness.run([case], t, bandwidth, rate)
    rows += new
    print(harness.markdown(new))
    print(f"({spec}: {time.time() - start:.0f} s with compiles)", flush=True)
print(harness.markdown(rows))
EOF

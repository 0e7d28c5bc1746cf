"""Where the low-rank decode kernels beat cuBLAS: the sweep behind `route` in csrc/ops/low_rank.cpp.

For decode-sized M and a range of (in, rank, out), times ``backend="triton"`` (the decode kernels,
forward and the backward's dx chain) against ``backend="cublas"`` (the ATen GEMMs), bf16:
  - fwd, graph of L layers: per call in a CUDA graph over weight copies that exceed the L2 (the
    serving loop's view; timing.add_graphed_layers), calls back to back;
  - fwd, eager: the harness's timer (GPU time, the host's queueing covered);
  - fwd+bwd, CUDA graph: one training step's gradients, replayed from a graph.
Prints one markdown table, times in us. With --layers, the graph of layers alone at the shapes
issue 4 tracks (M 16, 32, 64), to two decimals: a quick A/B of two builds in one device call
(install one, run it, install the other, run it again; results/low_rank.md).

    python benchmarks/low_rank_decode_sweep.py [--layers]     # on a GPU, with neuralops installed
"""

import sys

import torch

from neuralops.bench.timing import Timer, add_graphed, add_graphed_layers
from neuralops.core.triton_kernels import low_rank

SHAPES = [(4096, 128, 4096), (4096, 256, 4096), (4096, 512, 4096), (4096, 1024, 4096),
          (4096, 256, 11008), (4096, 512, 11008), (4096, 1024, 11008), (11008, 256, 4096)]
ROWS = (1, 16, 32, 64)
BACKENDS = ("triton", "cublas")
LAYERS_SHAPES, LAYERS_ROWS = [(4096, 256, 4096), (4096, 512, 4096), (4096, 256, 11008)], (16, 32, 64)


def times(timer: Timer, m: int, k: int, r: int, n: int, layers_only: bool = False) -> dict[str, float]:
    dt = torch.bfloat16
    x = torch.randn(m, k, device="cuda", dtype=dt)
    V = torch.randn(r, k, device="cuda", dtype=dt) / k**0.5
    U = torch.randn(n, r, device="cuda", dtype=dt) / r**0.5
    b = torch.randn(n, device="cuda", dtype=dt)
    xg, Ug, Vg, bg = (t.clone().requires_grad_(True) for t in (x, U, V, b))
    g = torch.randn(m, n, device="cuda", dtype=dt)
    impls = {}
    for be in BACKENDS:
        add_graphed_layers(impls, f"layers {be}", lambda U, V, b, be=be: low_rank.fwd(x, U, V, b, backend=be),
                           (U, V, b))
        if layers_only:
            continue
        impls[f"eager {be}"] = lambda be=be: low_rank.fwd(x, U, V, b, backend=be)
        add_graphed(impls, f"fwd+bwd {be}", lambda be=be: torch.autograd.grad(
            low_rank.fwd(xg, Ug, Vg, bg, backend=be), (xg, Ug, Vg, bg), g))
    out = {}
    for name, fn in impls.items():
        out[name.split(", graph")[0]] = 1e3 * timer.median_ms(fn)
    return out


def main() -> None:
    layers_only = "--layers" in sys.argv
    torch.manual_seed(0)
    timer = Timer(warmup=3, reps=40 if layers_only else 30)
    cols = ["layers triton", "layers cublas"]
    if not layers_only:
        cols += ["eager triton", "eager cublas", "fwd+bwd triton", "fwd+bwd cublas"]
    digits = 2 if layers_only else 1
    print("| in | rank | out | M | weights MB | " + " | ".join(cols) + " |")
    print("| ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in cols) + " |")
    for k, r, n in LAYERS_SHAPES if layers_only else SHAPES:
        for m in LAYERS_ROWS if layers_only else ROWS:
            t = times(timer, m, k, r, n, layers_only)
            mb = 2 * r * (k + n) / 1e6
            # A case whose graph capture failed (add_graphed says why) has no time.
            cells = (f"{t[c]:.{digits}f}" if c in t else "-" for c in cols)
            print(f"| {k} | {r} | {n} | {m} | {mb:.1f} | " + " | ".join(cells) + " |", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

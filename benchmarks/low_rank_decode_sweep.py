"""Where the low-rank decode kernels beat cuBLAS: the sweep behind `route` in csrc/ops/low_rank.cpp.

For decode-sized M and a range of (in, rank, out), times ``backend="triton"`` (the decode kernels,
forward and the backward's dx chain) against ``backend="cublas"`` (the ATen GEMMs), bf16:
  - fwd, graph of L layers: per call in a CUDA graph over weight copies that exceed the L2 (the
    serving loop's view; timing.add_graphed_layers), calls back to back;
  - fwd, eager: the harness's timer (GPU time, the host's queueing covered);
  - fwd+bwd, CUDA graph: one training step's gradients, replayed from a graph.
Prints one markdown table, times in us.

    python benchmarks/low_rank_decode_sweep.py      # on a GPU, with neuralops installed
"""

import torch

from neuralops.bench.timing import Timer, add_graphed, add_graphed_layers
from neuralops.core.triton_kernels import low_rank

SHAPES = [(4096, 128, 4096), (4096, 256, 4096), (4096, 512, 4096), (4096, 1024, 4096),
          (4096, 256, 11008), (4096, 512, 11008), (4096, 1024, 11008), (11008, 256, 4096)]
ROWS = (1, 16, 32, 64)
BACKENDS = ("triton", "cublas")


def times(timer: Timer, m: int, k: int, r: int, n: int) -> dict[str, float]:
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
        impls[f"eager {be}"] = lambda be=be: low_rank.fwd(x, U, V, b, backend=be)
        add_graphed(impls, f"fwd+bwd {be}", lambda be=be: torch.autograd.grad(
            low_rank.fwd(xg, Ug, Vg, bg, backend=be), (xg, Ug, Vg, bg), g))
    out = {}
    for name, fn in impls.items():
        out[name.split(", graph")[0]] = 1e3 * timer.median_ms(fn)
    return out


def main() -> None:
    torch.manual_seed(0)
    timer = Timer(warmup=3, reps=30)
    cols = ["layers triton", "layers cublas", "eager triton", "eager cublas", "fwd+bwd triton", "fwd+bwd cublas"]
    print("| in | rank | out | M | weights MB | " + " | ".join(cols) + " |")
    print("| ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in cols) + " |")
    for k, r, n in SHAPES:
        for m in ROWS:
            t = times(timer, m, k, r, n)
            mb = 2 * r * (k + n) / 1e6
            print(f"| {k} | {r} | {n} | {m} | {mb:.1f} | " + " | ".join(f"{t[c]:.1f}" for c in cols) + " |",
                  flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Low-rank decode per call in a CUDA graph of layers (weights read from DRAM each call), Triton
against cuBLAS, at the decode shapes issue 4 tracks: one line per case, for A/B runs of two builds
in one device call (install one, run this, install the other, run it again; results/low_rank.md).
The full sweep, eager and fwd+bwd included, is benchmarks/low_rank_decode_sweep.py.

    python benchmarks/low_rank_decode_layers.py      # on a GPU, with neuralops installed
"""

import torch

from neuralops.bench.timing import Timer, add_graphed_layers
from neuralops.core.triton_kernels import low_rank

SHAPES = [(4096, 256, 4096), (4096, 512, 4096), (4096, 256, 11008)]  # (in, rank, out)
ROWS = (16, 32, 64)


def main() -> None:
    timer = Timer(warmup=3, reps=40)
    torch.manual_seed(0)
    for k, r, n in SHAPES:
        for m in ROWS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            V = torch.randn(r, k, device="cuda", dtype=torch.bfloat16) / k**0.5
            U = torch.randn(n, r, device="cuda", dtype=torch.bfloat16) / r**0.5
            b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            impls: dict = {}
            for be in ("triton", "cublas"):
                add_graphed_layers(impls, be, lambda U, V, b, be=be: low_rank.fwd(x, U, V, b, backend=be), (U, V, b))
            t = {name.split(",")[0]: 1e3 * timer.median_ms(fn) for name, fn in impls.items()}
            print(f"{k}x{n} r{r} M{m}: triton {t.get('triton', float('nan')):.2f} us  "
                  f"cublas {t['cublas']:.2f} us", flush=True)
            del impls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

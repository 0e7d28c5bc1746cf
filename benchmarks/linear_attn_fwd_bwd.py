"""Causal forward+backward medians (L2 flushed) at the shapes the fused backward kernels serve
(bf16 with D <= 64: dq with the stats pass folded in, dk computing dv) and beside them the fp16
row, which takes the separate passes. For the installed neuralops; run once per build to compare
builds (results/linear_attn.md, eleventh session).

    python benchmarks/linear_attn_fwd_bwd.py        # with neuralops installed, on a machine with a GPU
"""

import torch

from neuralops.bench.timing import Timer
from neuralops.core.triton_kernels import linear_attn as la

# (dtype, phi, B, N, D), H = 16
CASES = [(torch.bfloat16, "elu+1", 4, 4096, 64), (torch.bfloat16, "elu+1", 4, 2048, 64),
         (torch.float16, "elu+1", 4, 4096, 64), (torch.bfloat16, "softmax_free", 4, 4096, 64),
         (torch.bfloat16, "elu+1", 1, 65536, 64), (torch.bfloat16, "relu", 4, 4096, 32)]


def main() -> None:
    timer = Timer(warmup=3, reps=25)
    for dtype, phi, b, n, d in CASES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, 16, n, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
                   for _ in range(3))
        grad_out = torch.randn_like(q)

        def step() -> None:
            for t in (q, k, v):
                t.grad = None
            la.fwd(q, k, v, True, phi=phi).backward(grad_out)

        name = f"causal fwd+bwd {str(dtype).removeprefix('torch.')} {phi} B{b} H16 N{n} D{d}"
        print(f"{name:52s} {timer.median_ms(step):.4f} ms", flush=True)


if __name__ == "__main__":
    main()

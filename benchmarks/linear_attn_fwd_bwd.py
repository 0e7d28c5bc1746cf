"""Causal forward+backward medians (L2 flushed) through autograd, which keeps the forward's segment
states for the backward (linear_attn_fwd_train), beside the same step with the states recomputed
(the forward without autograd, then the seed's bwd: a second state pass over k and v). Shapes: the
fused backward kernels' (bf16 with D <= 64: dq with the stats pass folded in, dk computing dv), the
fp16 row, which takes the separate passes, and the 128-feature ones. For the installed neuralops;
run once per build to compare builds (results/linear_attn.md, eleventh and twelfth sessions).

    python benchmarks/linear_attn_fwd_bwd.py        # with neuralops installed, on a machine with a GPU
"""

import torch

from neuralops.bench.timing import Timer
from neuralops.core.triton_kernels import linear_attn as la

# (dtype, phi, B, N, D), H = 16
CASES = [(torch.bfloat16, "elu+1", 4, 4096, 64), (torch.bfloat16, "elu+1", 4, 2048, 64),
         (torch.float16, "elu+1", 4, 4096, 64), (torch.bfloat16, "softmax_free", 4, 4096, 64),
         (torch.bfloat16, "elu+1", 1, 65536, 64), (torch.bfloat16, "relu", 4, 4096, 32),
         (torch.bfloat16, "elu+1", 4, 2048, 128), (torch.bfloat16, "elu+1", 4, 4096, 128),
         (torch.bfloat16, "elu+1", 1, 65536, 128)]


def main() -> None:
    timer = Timer(warmup=3, reps=25)
    print(f"{'causal fwd+bwd':52s} {'saved states':>12s} {'recomputed':>12s}")
    for dtype, phi, b, n, d in CASES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, 16, n, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
                   for _ in range(3))
        grad_out = torch.randn_like(q)

        def saved() -> None:
            for t in (q, k, v):
                t.grad = None
            la.fwd(q, k, v, True, phi=phi).backward(grad_out)

        def recomputed() -> None:
            with torch.no_grad():
                la.fwd(q, k, v, True, phi=phi)
            la.bwd(q, k, v, grad_out, True, phi=phi)

        name = f"{str(dtype).removeprefix('torch.')} {phi} B{b} H16 N{n} D{d}"
        print(f"{name:52s} {timer.median_ms(saved):9.4f} ms {timer.median_ms(recomputed):9.4f} ms", flush=True)


if __name__ == "__main__":
    main()

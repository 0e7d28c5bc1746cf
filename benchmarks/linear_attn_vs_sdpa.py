"""Causal forward+backward of the installed neuralops (elu+1) beside SDPA's causal softmax attention
on its default backend, bf16, B4 H16, N 2048 / 4096, D 64 / 128, timed the same way as
benchmarks/sdpa_backends.py (medians of 20 calls, each alone between CUDA events: host time
included, no L2 flush) so that the two are compared on one method (results/linear_attn.md,
twentieth session).

    python benchmarks/linear_attn_vs_sdpa.py default     # the argument only labels SDPA's rows
"""

import sys

import torch
import torch.nn.functional as F

from neuralops.core.triton_kernels import linear_attn as la
from sdpa_backends import median_ms  # this script's directory: sys.path[0]


def main() -> None:
    for b, h, n, d in [(4, 16, 2048, 64), (4, 16, 2048, 128), (4, 16, 4096, 64), (4, 16, 4096, 128)]:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        grad = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)

        def linear() -> None:
            torch.autograd.grad(la.fwd(q, k, v, True), (q, k, v), grad)

        def sdpa() -> None:
            torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), grad)

        print(f"B{b} H{h} N{n} D{d} fwd+bwd: neuralops elu+1 {median_ms(linear):.4f} ms, "
              f"sdpa {sys.argv[1]} {median_ms(sdpa):.4f} ms", flush=True)


if __name__ == "__main__":
    main()

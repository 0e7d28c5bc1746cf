"""Norm-wise relative error of the installed neuralops' linear attention (out, dq, dk, dv) against the
float64 O(N^2) reference, bf16, at sizes beyond the GPU tests' (results/linear_attn.md, tenth
session). Run from the repository root: the reference is triton_src's.

    python benchmarks/linear_attn_accuracy.py
"""

import sys
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parent.parent))
from neuralops.core.triton_kernels import linear_attn as la  # noqa: E402
from triton_src.linear_attn.kernels import PHI_KINDS, attention_reference  # noqa: E402

# (B, H, N, D, phi, causal)
CASES = [(2, 4, 2048, 64, "elu+1", True), (2, 4, 2048, 64, "elu+1", False), (2, 4, 4096, 128, "elu+1", False),
         (2, 4, 2048, 128, "relu", True), (1, 4, 8192, 64, "identity", False)]


def rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a.double() - ref).norm() / ref.norm()).item()


def main() -> None:
    for b, h, n, d, phi, causal in CASES:
        gen = torch.Generator(device="cuda").manual_seed(3)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
        if phi == "identity":  # keeps the normalizer away from zero
            q, k = q.abs(), k.abs()
        grad_out = torch.randn(b, h, n, d, device="cuda", generator=gen).to(torch.bfloat16)
        leaves = [t.requires_grad_() for t in (q, k, v)]
        out = la.fwd(*leaves, causal, phi=phi)
        grads = torch.autograd.grad(out, leaves, grad_out)
        ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
        ref = attention_reference(*ref_leaves, PHI_KINDS[phi], True, causal, None, 1.0, 1e-6)[0]
        ref_grads = torch.autograd.grad(ref, ref_leaves, grad_out.double())
        errs = " ".join(f"{name} {rel(x, r):.1e}" for name, x, r in
                        zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads)))
        print(f"{phi} {'causal' if causal else 'bidirectional'} B{b} H{h} N{n} D{d}: {errs}", flush=True)


if __name__ == "__main__":
    main()

"""Whole-call medians (L2 flushed) of the linear-attention shapes the issue and the sweeps track, for
the installed neuralops: run it once per build in one lease to compare builds (results/linear_attn.md,
ninth session's A/B). bf16 and elu+1 unless marked; causal forward, causal forward+backward, bidirectional
forward; the 256-feature and fp16 bidirectional rows were added after the ninth session's first A/B, the
fp16 forward+backward rows in the twenty-third session, the 256-feature forward+backward and the
Cosformer rows at 128 features (which run the 256-feature Triton kernels) in the twenty-eighth, its
causal forward in the twenty-ninth, Cosformer at 256 features (the 512-feature kernels) in the
thirty-seventh, fp16's and fp32's there in the forty-third (fp16's run its 512 block; fp32's the
fallback, which its built 512 block lost to in the forty-fourth), and fp32 at 64 and 128 features, which
got blocks of their own, and fp32 at 256 (its dq and dk built at ptxas -O1), in the forty-fifth.

    python benchmarks/linear_attn_calls.py [--fallback] [text ...]  # with neuralops installed, on a GPU

With arguments, only the cases whose name contains one of them (e.g. `fp16`); with --fallback, the
same calls through linear_attn_pytorch_fallback (what runs where the kernels do not).
"""

import sys
from typing import Callable

import torch

from neuralops.bench.timing import Timer
from neuralops.core.triton_kernels import linear_attn as la


def _inputs(b: int, h: int, n: int, d: int, grad: bool = False,
            dtype: torch.dtype = torch.bfloat16) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    ts = [torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3)]
    return [t.requires_grad_(grad) for t in ts]


FWD = la.linear_attn_pytorch_fallback if "--fallback" in sys.argv else la.fwd


def _weights(n: int, cosformer: bool) -> tuple:
    return la.cosformer_weights(n, device="cuda") if cosformer else (None, None)


_TAGS = {torch.bfloat16: "", torch.float16: " fp16", torch.float32: " fp32"}


def fwd_case(b: int, h: int, n: int, d: int, causal: bool, dtype: torch.dtype = torch.bfloat16,
             cosformer: bool = False) -> tuple[str, Callable[[], object]]:
    q, k, v = _inputs(b, h, n, d, dtype=dtype)
    cos, sin = _weights(n, cosformer)
    tag = _TAGS[dtype] + (" cosformer" if cosformer else "")
    name = f"{'causal' if causal else 'bidirectional'} fwd{tag} B{b} H{h} N{n} D{d}"
    return name, lambda: FWD(q, k, v, causal, cos_weight=cos, sin_weight=sin)


def fwd_bwd_case(b: int, h: int, n: int, d: int, dtype: torch.dtype = torch.bfloat16,
                 phi: str = "elu+1", cosformer: bool = False, causal: bool = True) -> tuple[str, Callable[[], object]]:
    q, k, v = _inputs(b, h, n, d, grad=True, dtype=dtype)
    grad_out = torch.randn_like(q)
    cos, sin = _weights(n, cosformer)

    def step() -> None:
        for t in (q, k, v):
            t.grad = None
        FWD(q, k, v, causal, phi=phi, cos_weight=cos, sin_weight=sin).backward(grad_out)

    tag = (_TAGS[dtype] + ("" if phi == "elu+1" else f" {phi}")
           + (" cosformer" if cosformer else ""))
    return f"{'causal' if causal else 'bidirectional'} fwd+bwd{tag} B{b} H{h} N{n} D{d}", step


def main() -> None:
    timer = Timer(warmup=3, reps=25)
    cases = [fwd_case(4, 16, 4096, 64, True), fwd_case(1, 16, 65536, 128, True), fwd_case(4, 16, 4096, 128, True),
             fwd_case(4, 16, 2048, 128, True),
             fwd_bwd_case(4, 16, 4096, 64), fwd_bwd_case(4, 16, 2048, 64), fwd_bwd_case(4, 16, 2048, 128),
             fwd_bwd_case(4, 16, 4096, 128), fwd_bwd_case(1, 16, 65536, 128),
             fwd_case(4, 16, 4096, 64, False), fwd_case(4, 16, 4096, 128, False), fwd_case(1, 16, 65536, 128, False),
             fwd_case(4, 16, 4096, 256, True), fwd_case(4, 16, 4096, 256, False), fwd_bwd_case(4, 16, 4096, 256),
             fwd_bwd_case(4, 16, 4096, 256, causal=False),
             fwd_case(4, 16, 4096, 128, True, cosformer=True), fwd_case(4, 16, 4096, 128, False, cosformer=True),
             fwd_bwd_case(4, 16, 4096, 128, cosformer=True),
             fwd_case(4, 16, 4096, 256, True, cosformer=True), fwd_case(4, 16, 4096, 256, False, cosformer=True),
             fwd_bwd_case(4, 16, 4096, 256, cosformer=True),
             fwd_case(4, 16, 4096, 128, False, torch.float16),
             fwd_bwd_case(4, 16, 4096, 64, torch.float16), fwd_bwd_case(4, 16, 2048, 64, torch.float16),
             fwd_bwd_case(4, 16, 4096, 32, torch.float16),
             fwd_case(4, 16, 4096, 256, True, torch.float16, cosformer=True),
             fwd_case(4, 16, 4096, 256, False, torch.float16, cosformer=True),
             fwd_bwd_case(4, 16, 4096, 256, torch.float16, cosformer=True),
             fwd_case(4, 16, 4096, 256, True, torch.float32, cosformer=True),
             fwd_case(4, 16, 4096, 256, False, torch.float32, cosformer=True),
             fwd_bwd_case(4, 16, 4096, 256, torch.float32, cosformer=True),
             fwd_case(4, 16, 4096, 64, True, torch.float32), fwd_case(4, 16, 4096, 64, False, torch.float32),
             fwd_bwd_case(4, 16, 4096, 64, torch.float32), fwd_case(4, 16, 4096, 128, True, torch.float32),
             fwd_bwd_case(4, 16, 2048, 128, torch.float32), fwd_bwd_case(4, 16, 2048, 256, torch.float32),
             fwd_bwd_case(4, 16, 2048, 128, torch.float32, cosformer=True)]
    filters = [a for a in sys.argv[1:] if a != "--fallback"]
    for name, run in cases:
        if filters and not any(text in name for text in filters):
            continue
        print(f"{name:40s} {timer.median_ms(run):.4f} ms", flush=True)


if __name__ == "__main__":
    main()

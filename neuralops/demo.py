"""``python -m neuralops.demo``: runs every op forward and backward on the GPU when there is one, else
on the PyTorch fallbacks, checks each against a plain PyTorch reference and prints which path ran."""

from __future__ import annotations

import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F

import neuralops
from neuralops.core.triton_kernels import gqa, linear_attn, low_rank


def _time_ms(fn: Callable[[], object], reps: int = 10) -> float:
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _path(supported: bool) -> str:
    return "AOT Triton kernels" if supported else "PyTorch fallback"


def main() -> int:
    info = neuralops.build_info()
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    tol = 2e-2 if cuda else 1e-5
    print(f"neuralops {neuralops.__version__}: library loaded: {info['loaded']}; device: {device}")
    ok = True

    b, h, hkv, n, d = (4, 16, 4, 4096, 64) if cuda else (2, 4, 2, 512, 32)
    q = torch.randn(b, h, n, d, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(b, hkv, n, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(b, hkv, n, d, device=device, dtype=dtype, requires_grad=True)
    out = linear_attn.fwd(q, k, v, True)
    out.float().square().sum().backward()
    ref = linear_attn.linear_attn_pytorch_fallback(*(t.detach().double() for t in (q, k, v)), True)
    err = _rel(out, ref)
    ms = _time_ms(lambda: linear_attn.fwd(q, k, v, True))
    ok &= err <= tol and q.grad is not None and torch.isfinite(k.grad).all().item()
    print(f"linear_attn causal B{b} H{h} Hkv{hkv} N{n} D{d} {dtype}: {_path(linear_attn.is_supported(q, k, v))}; "
          f"error vs float64 {err:.1e}; gradients reached q, k, v; {ms:.3f} ms")

    m, n_in, n_out, r = (8192, 4096, 4096, 256) if cuda else (256, 512, 512, 64)
    x = torch.randn(m, n_in, device=device, dtype=dtype)
    layer = neuralops.nn.LowRankLinear.from_linear(torch.nn.Linear(n_in, n_out), rank=r).to(device, dtype)
    y = layer(x)
    ref = F.linear(F.linear(x.double(), layer.V.double()), layer.U.double(), layer.bias.double())
    err = _rel(y, ref)
    ms = _time_ms(lambda: layer(x))
    ok &= err <= tol
    print(f"low_rank M{m} {n_in}->{n_out} r{r} {dtype}: {_path(low_rank.is_supported(x, layer.U, layer.V))}; "
          f"error vs float64 {err:.1e}; {ms:.3f} ms ({sum(p.numel() for p in layer.parameters()) / 1e6:.2f} M "
          f"parameters instead of {(n_in * n_out + n_out) / 1e6:.2f} M)")

    ek, ev = gqa.fwd(k, v, hkv, h)
    exact = torch.equal(ek, torch.repeat_interleave(k, h // hkv, dim=1))
    ok &= exact
    ms = _time_ms(lambda: gqa.fwd(k, v, hkv, h))
    print(f"gqa Hkv{hkv}->H{h} N{n} D{d} {dtype}: {_path(gqa.is_supported(k, v, hkv, h))}; exact: {exact}; "
          f"{ms:.3f} ms")
    print("all checks passed" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""``python -m neuralops.demo``: runs each op on the GPU when there is one, else on the fallbacks,
checks it against plain PyTorch and prints which path ran."""

from __future__ import annotations

import sys
import time

import torch

import neuralops
from neuralops.core.triton_kernels import gqa


def _time_ms(fn, reps: int = 20) -> float:
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3


def main() -> int:
    info = neuralops.build_info()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    print(f"neuralops {neuralops.__version__}: library loaded: {info['loaded']}; device: {device}")

    b, hkv, h, n, d = (4, 8, 32, 4096, 128) if device == "cuda" else (2, 2, 8, 256, 64)
    k = torch.randn(b, hkv, n, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(b, hkv, n, d, device=device, dtype=dtype, requires_grad=True)
    path = "AOT Triton kernels" if gqa.is_supported(k, v, hkv, h) else "PyTorch fallback"
    ek, ev = gqa.fwd(k, v, hkv, h)
    exact = torch.equal(ek, torch.repeat_interleave(k, h // hkv, dim=1))
    (ek.float().sum() + ev.float().sum()).backward()
    grads_ok = torch.allclose(k.grad.float(), torch.full_like(k.grad.float(), h // hkv))
    ms = _time_ms(lambda: gqa.fwd(k, v, hkv, h))
    peer = _time_ms(lambda: (torch.repeat_interleave(k, h // hkv, 1), torch.repeat_interleave(v, h // hkv, 1)))
    print(f"gqa  B{b} Hkv{hkv}->H{h} N{n} D{d} {dtype}: {path}; exact: {exact}; gradients: {grads_ok}; "
          f"{ms:.3f} ms (repeat_interleave {peer:.3f} ms)")
    return 0 if exact and grads_ok else 1


if __name__ == "__main__":
    sys.exit(main())

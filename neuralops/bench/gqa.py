"""GQA head expansion (fwd, on k and v) and group sum (bwd) against the usual PyTorch idioms."""

from __future__ import annotations

import torch

from neuralops.bench.harness import Case
from neuralops.core.triton_kernels import gqa

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Hugging Face transformers' repeat_kv: expand a new axis, then reshape (one copy)."""
    b, h, n, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, n, d).reshape(b, h * n_rep, n, d)


def _inputs(b: int, hkv: int, n: int, d: int, dtype: torch.dtype, transposed: bool) -> list[torch.Tensor]:
    if transposed:  # [B, N, Hkv, D] storage viewed as [B, Hkv, N, D], as projections produce it
        return [torch.randn(b, n, hkv, d, device="cuda", dtype=dtype).transpose(1, 2) for _ in range(2)]
    return [torch.randn(b, hkv, n, d, device="cuda", dtype=dtype) for _ in range(2)]


def _expand_case(b: int, hkv: int, h: int, n: int, d: int, dt: str, transposed: bool = False) -> Case:
    dtype = _DTYPES[dt]
    k, v = _inputs(b, hkv, n, d, dtype, transposed)
    n_rep = h // hkv
    out_k, _ = gqa.fwd(k, v, hkv, h)
    if not torch.equal(out_k, torch.repeat_interleave(k, n_rep, dim=1)):
        raise AssertionError("neuralops gqa.fwd differs from repeat_interleave")
    size = torch.finfo(dtype).bits // 8
    nbytes = 2 * (b * hkv * n * d + b * h * n * d) * size
    layout = " [B,N,H,D] view" if transposed else ""
    return Case("gqa fwd", f"B{b} Hkv{hkv} H{h} N{n} D{d} {dt}{layout}", nbytes, 0, {
        "neuralops": lambda: gqa.fwd(k, v, hkv, h),
        "repeat_interleave": lambda: (torch.repeat_interleave(k, n_rep, dim=1),
                                      torch.repeat_interleave(v, n_rep, dim=1)),
        "HF repeat_kv (expand+reshape)": lambda: (_repeat_kv(k, n_rep), _repeat_kv(v, n_rep)),
    })


def _reduce_case(b: int, hkv: int, h: int, n: int, d: int, dt: str) -> Case:
    dtype = _DTYPES[dt]
    gk, gv = [torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(2)]
    n_rep = h // hkv
    size = torch.finfo(dtype).bits // 8
    nbytes = 2 * (b * h * n * d + b * hkv * n * d) * size
    return Case("gqa bwd", f"B{b} Hkv{hkv} H{h} N{n} D{d} {dt}", nbytes, 0, {
        "neuralops": lambda: gqa.bwd(gk, gv, hkv, h),
        "view(...).sum(2)": lambda: (gk.view(b, hkv, n_rep, n, d).sum(2), gv.view(b, hkv, n_rep, n, d).sum(2)),
    })


def cases(quick: bool = False) -> list[Case]:
    out = [
        _expand_case(4, 8, 32, 4096, 128, "bf16"),
        _reduce_case(4, 8, 32, 4096, 128, "bf16"),
    ]
    if quick:
        return out
    return out + [
        _expand_case(4, 8, 32, 4096, 128, "bf16", transposed=True),
        _expand_case(4, 1, 32, 4096, 128, "bf16"),
        _expand_case(8, 8, 32, 2048, 64, "fp16"),
        _expand_case(4, 8, 32, 2048, 128, "fp32"),
        _expand_case(3, 5, 20, 1000, 80, "bf16"),
        _expand_case(64, 8, 32, 1, 128, "bf16"),
        _reduce_case(4, 1, 32, 4096, 128, "bf16"),
        _reduce_case(8, 8, 32, 2048, 64, "fp16"),
        _reduce_case(4, 8, 32, 2048, 128, "fp32"),
        _reduce_case(3, 5, 20, 1000, 80, "bf16"),
    ]

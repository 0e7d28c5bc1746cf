"""Shared test utilities."""

from __future__ import annotations

import torch


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Norm-wise relative error ||out - ref|| / ||ref||, computed in float64."""
    out64, ref64 = out.detach().double(), ref.detach().double()
    denom = ref64.norm().item()
    err = (out64 - ref64).norm().item()
    return err / denom if denom > 0 else err


def poison_allocator(device: str = "cuda", nbytes: int = 1 << 28) -> None:
    """Fill a block of the caching allocator with NaN and free it, so that outputs allocated next
    likely start as NaN: an element a kernel forgets to write then fails the comparison."""
    block = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    block.fill_(float("nan"))
    del block

"""Shared test utilities."""

from __future__ import annotations

import pytest
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


def _interpreter_indexes_scalars() -> bool:
    """Triton's interpreter before 3.7 turns run-time scalars into 1-element arrays, which NumPy 2.4+
    refuses to use as an index (``range(0, D, BLOCK)`` in a kernel then fails). Kernels are fine.
    Reads versions without importing Triton: an import here, under the CPU tests' TRITON_INTERPRET=1,
    would leave Triton's own jit functions interpreted, and torch.compile in the GPU tests fails."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        triton, numpy = version("triton"), version("numpy")
    except PackageNotFoundError:
        return False
    major_minor = lambda v: tuple(int(x) for x in v.split(".")[:2])  # noqa: E731
    return major_minor(triton) >= (3, 7) or major_minor(numpy) < (2, 4)


requires_interpreter = pytest.mark.skipif(
    not _interpreter_indexes_scalars(),
    reason="this Triton's interpreter cannot index with run-time scalars under this NumPy (CI has Triton 3.8)")

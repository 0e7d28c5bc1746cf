"""The ops backed by AOT-compiled Triton kernels (module names follow the public API)."""

from neuralops.core.triton_kernels import gqa, linear_attn, low_rank

__all__ = ["gqa", "linear_attn", "low_rank"]

"""The ops backed by AOT-compiled Triton kernels (module names follow the public API)."""

from neuralops.core.triton_kernels import gqa

__all__ = ["gqa"]

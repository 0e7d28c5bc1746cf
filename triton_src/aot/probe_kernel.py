"""The kernel compiled to find out whether Triton supports an architecture (see probe.py)."""

import triton
import triton.language as tl


@triton.jit
def probe_kernel(ptr):
    tl.store(ptr + tl.arange(0, 32), tl.zeros((32,), dtype=tl.float32))

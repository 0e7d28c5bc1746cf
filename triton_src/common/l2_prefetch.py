"""Prefetching global memory into L2 before a kernel may read it.

A kernel launched as a programmatic dependent of a kernel it knows nothing about (another op's)
starts while that kernel still runs, and may read nothing before ``wait_for_primary``: the other
kernel may be writing it. A prefetch into L2 is no read in the memory model (PTX: a hint with no
effect on values; L2 is where every SM's global accesses meet), so it is safe before the wait
whatever the other kernel writes. The kernel's loads after the wait then find their lines in L2
(or already on their way) instead of paying DRAM's latency on the critical path.
"""

import triton
import triton.language as tl
from triton import knobs
from triton.runtime.jit import constexpr_function

_LINE_BYTES = tl.constexpr(128)  # L2's line: one prefetch per line


@constexpr_function
def _can_prefetch():
    # Inline PTX: the interpreter runs none (there the prefetch is skipped: it changes no value).
    return not knobs.runtime.interpret


@triton.jit
def _prefetch_lines(ptrs):
    # The asm's register output exists only because inline asm must return a value; is_pure=False
    # keeps the unused result from being removed.
    tl.inline_asm_elementwise("mov.u32 $0, 0;\n\tprefetch.global.L2 [$1];", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def prefetch_rows_l2(base, row_lo, row_hi, n_cols, row_stride,
                     BLOCK_ROWS: tl.constexpr, LINES: tl.constexpr):
    """Prefetches elements [0, n_cols) of rows [row_lo, row_hi) of a row-major matrix at `base`
    (row stride `row_stride` elements) into L2, BLOCK_ROWS rows by LINES lines at a time."""
    if _can_prefetch():
        line: tl.constexpr = _LINE_BYTES * 8 // base.dtype.element_ty.primitive_bitwidth
        rr0 = tl.arange(0, BLOCK_ROWS)
        cc0 = tl.arange(0, LINES) * line
        for r0 in range(row_lo, row_hi, BLOCK_ROWS):
            rr = r0 + rr0
            for c0 in range(0, n_cols, LINES * line):
                cc = c0 + cc0
                ok = (rr < row_hi)[:, None] & (cc < n_cols)[None, :]
                # Masked-off lanes prefetch the block's first line again rather than an address
                # outside the matrix.
                offs = tl.where(ok, rr.to(tl.int64)[:, None] * row_stride + cc[None, :], r0.to(tl.int64) * row_stride)
                _prefetch_lines(base + offs)

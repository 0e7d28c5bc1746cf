"""GQA head expansion (forward) and group sum (backward) as Triton kernels.

Shapes and layout
    x    [B, Hkv, N, D]   any strides, unit stride along D
    out  [B, H,   N, D]   H = Hkv * n_rep

    expand:  out[b, h] = x[b, h // n_rep]              (torch.repeat_interleave(x, n_rep, dim=1),
                                                        Hugging Face ``repeat_kv``)
    reduce:  dx[b, j]  = sum_r dout[b, j * n_rep + r]  (the backward of expand; fp32 accumulation)

Each program owns one (batch, kv head, block of BLOCK_N rows): expand reads that tile once and
writes it n_rep times, reduce reads n_rep tiles and writes one, so both move the minimum number of
bytes. Axis 0 of the grid enumerates ``B * Hkv * cdiv(N, BLOCK_N)`` programs; offsets are int64, so
tensors beyond 2**31 elements are addressed correctly.

The naive references these kernels are tested against are ``expand_reference`` and
``reduce_reference`` below.
"""

import torch
import triton
import triton.language as tl


def expand_reference(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return torch.repeat_interleave(x, n_rep, dim=1)


def reduce_reference(grad: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, n, d = grad.shape
    return grad.float().view(b, h // n_rep, n_rep, n, d).sum(2).to(grad.dtype)


@triton.jit
def _program_tile(HKV, N, BLOCK_N: tl.constexpr):
    """This program's batch, KV head and rows (int64, so offsets past 2**31 elements are right)."""
    pid = tl.program_id(0).to(tl.int64)
    n_blocks = tl.cdiv(N, BLOCK_N)
    bh = pid // n_blocks
    rows = (pid % n_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    return bh // HKV, bh % HKV, rows


@triton.jit
def gqa_expand_kernel(
    x_ptr, out_ptr,
    HKV, N, D, n_rep,
    sx_b, sx_h, sx_n,
    so_b, so_h, so_n,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b, h, rows = _program_tile(HKV, N, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    x_tile = x_ptr + b * sx_b + h * sx_h + rows[:, None] * sx_n
    out_tile = out_ptr + b * so_b + h * n_rep * so_h + rows[:, None] * so_n
    for d0 in range(0, D, BLOCK_D):
        c = d0 + cols
        mask = (rows[:, None] < N) & (c[None, :] < D)
        tile = tl.load(x_tile + c[None, :], mask=mask)
        for r in range(n_rep):
            tl.store(out_tile + r * so_h + c[None, :], tile, mask=mask)


@triton.jit
def gqa_reduce_kernel(
    g_ptr, out_ptr,
    HKV, N, D, n_rep,
    sg_b, sg_h, sg_n,
    so_b, so_h, so_n,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b, h, rows = _program_tile(HKV, N, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    g_tile = g_ptr + b * sg_b + h * n_rep * sg_h + rows[:, None] * sg_n
    out_tile = out_ptr + b * so_b + h * so_h + rows[:, None] * so_n
    for d0 in range(0, D, BLOCK_D):
        c = d0 + cols
        mask = (rows[:, None] < N) & (c[None, :] < D)
        acc = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
        for r in range(n_rep):
            acc += tl.load(g_tile + r * sg_h + c[None, :], mask=mask).to(tl.float32)
        tl.store(out_tile + c[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)

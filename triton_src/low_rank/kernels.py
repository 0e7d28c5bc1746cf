"""Low-rank projection ``y = (x @ V.T) @ U.T + bias`` and its backward as Triton kernels.

Shapes and layout (every operand has unit stride along its last dimension)
    x     [M, K]   the input flattened over its leading dims (K = in_features); see "Rows" below
    V     [R, K]   the down projection (R = rank), row stride sv_r
    U     [N, R]   the up projection (N = out_features), row stride su_n
    bias  [N]
    h     [M, R]   h = x @ V.T, rounded to the input dtype (as two F.linear calls round it)
    y     [M, N]   y = h @ U.T + bias
    backward, with g = dy [M, N]:
    dh = g @ U [M, R]   dx = dh @ V [M, K]   dU = g.T @ h [N, R]   dV = dh.T @ x [R, K]   dbias = g.sum(0)

Products accumulate in fp32. fp32 operands use IEEE fp32 products (``input_precision="ieee"``):
TF32 would miss the 1e-4 relative accuracy fp32 users expect. Any M, K, R, N: tails are masked.

Rows: an activation may be a view whose leading dims do not collapse into one stride (say a
transposed [T, B, K] seen as [B, T, K]). Its row m then starts at
``(m // inner) * s_outer + (m % inner) * s_inner``; a plain [M, K] matrix has inner = M, s_outer = 0.
Any layout whose leading dims collapse into at most two such levels is read in place.

dx and dh are the forward chain applied to (g, U.T, V.T): ``dx = (g @ (U.T).T) @ (V.T).T``. The
forward kernels compute them from contiguous transposes of the weights, which are small next to the
activations, with h's slot receiving dh.

Kernels
    low_rank_fused_kernel    M > 64, R <= BLOCK_R (256): a program owns BLOCK_M rows, computes their
                             h tile over all of K and keeps it on chip while it sweeps its share of
                             the N columns (grid axis 1 splits N when M alone gives too few programs;
                             each split recomputes the h tile). h is stored only when asked (training).
    low_rank_decode_partial_kernel, low_rank_decode_out_kernel
                             M <= 64, any R. The op is then a read of V and U and little arithmetic,
                             so the goal is to stream both weights at once, each element read by one
                             program, across all SMs. The first kernel writes fp32 partials of
                             h over (R block, K range); the second is launched as its programmatic
                             dependent (PDL, sm_90 and newer): its programs load their U tiles while
                             the first still reads V, wait for it (griddepcontrol.wait), then sum the
                             partials in a fixed order and write y. No counters, no zeroed buffer.
                             The first is itself a programmatic dependent of the kernel before it:
                             while that one (the previous layer, in a served model) finishes, it
                             prefetches both weights into L2, so that a chain of decode calls reads
                             the next call's weights from DRAM during the current call.
    low_rank_decode_reduce_kernel
                             at the BLOCK_M values spec.py builds it for (64): chained between the
                             two, it sums the partials once into one fp32 slice, which every program
                             of the second kernel then reads instead of all the partials.
    gemm_nt_kernel           C = A @ B.T (+ bias): the two-GEMM path, used where R is too large to keep
                             h on chip.
    low_rank_wgrad_kernel    dU = g.T @ h and dV = dh.T @ x in one launch (their output tiles together
                             fill the GPU), with dbias folded into the dU tiles that read g anyway.
The fused and decode kernels are compiled only with 16-byte hints (see spec.py); the op sends
shapes that miss them (sizes not multiples of 16, misaligned views) to gemm_nt and wgrad, which are
also built without hints. Each kernel sits beside its naive reference (``*_reference``; the fused
and decode kernels compute ``low_rank_reference``), which the interpreter tests compare against.
"""

import torch
import triton
import triton.language as tl

from triton_src.common.grid_dependency import launch_dependents, wait_for_primary
from triton_src.common.l2_prefetch import prefetch_rows_l2


def _rows_2d(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])


def low_rank_reference(x: torch.Tensor, U: torch.Tensor, V: torch.Tensor,
                       bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, h) as the kernels compute them: fp32 products, h rounded to the input dtype."""
    h = (_rows_2d(x).float() @ V.float().T).to(x.dtype)
    y = h.float() @ U.float().T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype), h


def low_rank_bwd_reference(x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, g: torch.Tensor,
                           h: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(dx, dh, dU, dV, dbias) as the kernels compute them; dh is rounded to the input dtype."""
    x2, g2 = _rows_2d(x).float(), _rows_2d(g).float()
    dh = (g2 @ U.float()).to(x.dtype)
    dx = dh.float() @ V.float()
    dU = g2.T @ h.float()
    dV = dh.float().T @ x2
    return dx.to(x.dtype), dh, dU.to(x.dtype), dV.to(x.dtype), g2.sum(0).to(x.dtype)


@triton.jit
def _dot(a, b, acc):
    if a.dtype == tl.float32:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _row_offsets(rows, inner, s_outer, s_inner):
    """Element offsets of the rows' starts (int64), for the two-level row layout above."""
    return (rows // inner).to(tl.int64) * s_outer + (rows % inner).to(tl.int64) * s_inner


@triton.jit
def nt_tile(a_rows, b_rows, a_ok, b_ok, k_lo, k_hi,
            BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
    """The fp32 [BLOCK_A, BLOCK_B] tile A[a, k_lo:k_hi] @ B[b, k_lo:k_hi].T, from the start pointers
    of A's and B's rows and their masks (rows with unit stride along K): h = x @ V.T or its partial
    over a range of K, y = h @ U.T, any C = A @ B.T."""
    kk0 = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_A, BLOCK_B), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        kk = k0 + kk0
        k_ok = kk < k_hi
        a = tl.load(a_rows[:, None] + kk[None, :], mask=a_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_rows[None, :] + kk[:, None], mask=b_ok[None, :] & k_ok[:, None], other=0.0)
        acc = _dot(a, b, acc)
    return acc


# ---- fused forward (M > 64); its reference is low_rank_reference --------------------------------

@triton.jit
def low_rank_fused_kernel(
    x_ptr, v_ptr, u_ptr, bias_ptr, y_ptr, h_ptr,
    M, K, R, N, n_per_prog, has_bias, store_h,
    x_inner, sx_outer, sx_inner, sv_r, su_n, sy_m, sh_m,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    x_rows = x_ptr + _row_offsets(rows, x_inner, sx_outer, sx_inner)
    rr = tl.arange(0, BLOCK_R)
    r_ok = rr < R
    v_rows = v_ptr + rr.to(tl.int64) * sv_r
    acc = nt_tile(x_rows, v_rows, row_ok, r_ok, 0, K, BLOCK_M, BLOCK_R, BLOCK_K)
    h = acc.to(y_ptr.dtype.element_ty)
    if (store_h != 0) & (pid_n == 0):
        h_out = h_ptr + rows.to(tl.int64)[:, None] * sh_m + rr[None, :]
        tl.store(h_out, h, mask=row_ok[:, None] & r_ok[None, :])

    u_cols = u_ptr + rr[:, None]
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * sy_m
    n_lo = pid_n * n_per_prog
    n_hi = tl.minimum(n_lo + n_per_prog, N)
    for n0 in range(n_lo, n_hi, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        c_ok = cols < n_hi
        ut = tl.load(u_cols + cols.to(tl.int64)[None, :] * su_n, mask=r_ok[:, None] & c_ok[None, :], other=0.0)
        out = _dot(h, ut, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
        if has_bias != 0:
            out += tl.load(bias_ptr + cols, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(y_rows + cols[None, :], out.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & c_ok[None, :])


# ---- decode forward (M <= 64), two kernels chained by programmatic dependent launch ------------
# Their reference is low_rank_reference.


@triton.jit
def low_rank_decode_partial_kernel(
    x_ptr, v_ptr, u_ptr, part_ptr,
    M, K, R, N, k_split,
    x_inner, sx_outer, sx_inner, sv_r, su_n,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """A decode call's first kernel: part[ks, :M, rb rows] = x[:, K range ks] @ V[rb rows, K range ks].T.

    Grid (n_rblocks, ksplit): each V element is read by one program, all at the same time. part is
    fp32 [ksplit, M, R]; the programs together write all of it. low_rank_decode_out_kernel sums the
    partials in a fixed order (an atomic-add reduction would make results depend on the order
    programs finish in).

    Launched as a programmatic dependent of whatever kernel precedes it, so it starts while that
    one (say the previous layer's) still runs: before it waits, it only prefetches into L2 its V
    slice and a share of U (the second kernel's). That kernel may be writing them; a prefetch
    changes no value, so the loads after the wait still see its writes, mostly from L2.
    """
    rb = tl.program_id(0)
    ks = tl.program_id(1)
    r_lo = rb * BLOCK_R
    k_lo = ks * k_split
    k_hi = tl.minimum(k_lo + k_split, K)
    prefetch_rows_l2(v_ptr + k_lo, r_lo, tl.minimum(r_lo + BLOCK_R, R), k_hi - k_lo, sv_r, 32, 4)
    n_programs = tl.num_programs(0) * tl.num_programs(1)
    u_rows = tl.cdiv(N, n_programs)
    u_lo = (rb + ks * tl.num_programs(0)) * u_rows
    prefetch_rows_l2(u_ptr, u_lo, tl.minimum(u_lo + u_rows, N), R, su_n, 32, 4)
    wait_for_primary()
    # Only now (the previous kernel's writes are visible): the second kernel's programs load U
    # before they wait, on the SMs this grid leaves free.
    launch_dependents()
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    rr = r_lo + tl.arange(0, BLOCK_R)
    r_ok = rr < R
    x_rows = x_ptr + _row_offsets(rows, x_inner, sx_outer, sx_inner)
    v_rows = v_ptr + rr.to(tl.int64) * sv_r
    acc = nt_tile(x_rows, v_rows, row_ok, r_ok, k_lo, k_hi, BLOCK_M, BLOCK_R, BLOCK_K)
    part = part_ptr + ks * (M.to(tl.int64) * R) + (rows.to(tl.int64) * R)[:, None] + rr[None, :]
    tl.store(part, acc, mask=row_ok[:, None] & r_ok[None, :])


@triton.jit
def low_rank_decode_reduce_kernel(part_ptr, sum_ptr, size, n_ksplit, BLOCK: tl.constexpr, KS_UNROLL: tl.constexpr):
    """Between the decode pair at larger M: sum[i] = part[0, i] + ... + part[n_ksplit - 1, i] over the
    fp32 partials flattened ([n_ksplit, M * R] -> [M * R]), added in the order the output kernel adds
    them, so that it reads one slice (n_ksplit = 1) and computes the same h bit for bit.

    Every program of the output kernel sums all the partials it needs for its h; at M = 64 that is
    n_ksplit * 64 KB each from L2, summed here once instead. Grid cdiv(size, BLOCK); launched as a
    programmatic dependent of low_rank_decode_partial_kernel, and lets the output kernel start at
    once (its programs load only U and bias before they wait, which no kernel of the call writes).
    """
    launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < size
    wait_for_primary()
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for s0 in range(0, n_ksplit, KS_UNROLL):
        for j in tl.static_range(KS_UNROLL):
            total += tl.load(part_ptr + (s0 + j) * size.to(tl.int64) + offs, mask=ok & (s0 + j < n_ksplit),
                             other=0.0)
    tl.store(sum_ptr + offs, total, mask=ok)


@triton.jit
def _hidden_chunk(part_ptr, h_ptr, rows, rr, M, R, n_ksplit, store_h, sh_m, BLOCK_M: tl.constexpr,
                  BLOCK_R: tl.constexpr, KS_UNROLL: tl.constexpr):
    """h[:, rr] in h's dtype: the partials summed over ks in order (so results are deterministic),
    rounded as two F.linear calls round h; stored to h_ptr when store_h."""
    tile_ok = (rows < M)[:, None] & (rr < R)[None, :]
    part = part_ptr + (rows.to(tl.int64) * R)[:, None] + rr[None, :]
    slice_size = M.to(tl.int64) * R
    total = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
    for s0 in range(0, n_ksplit, KS_UNROLL):
        for j in tl.static_range(KS_UNROLL):
            total += tl.load(part + (s0 + j) * slice_size, mask=tile_ok & (s0 + j < n_ksplit), other=0.0)
    h = total.to(h_ptr.dtype.element_ty)
    if store_h:
        tl.store(h_ptr + rows.to(tl.int64)[:, None] * sh_m + rr[None, :], h, mask=tile_ok)
    return h


@triton.jit
def low_rank_decode_out_kernel(
    part_ptr, u_ptr, bias_ptr, y_ptr, h_ptr,
    M, R, N, n_ksplit, has_bias, store_h,
    su_n, sy_m, sh_m,
    BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, KS_UNROLL: tl.constexpr,
):
    """A decode call's second kernel: y[:, nb cols] = h @ U[nb cols].T (+ bias), h from the partials.

    Grid max(1, cdiv(N, BLOCK_N)); launched as a programmatic dependent of
    low_rank_decode_partial_kernel, so its programs start while that kernel still reads V. Each
    loads what that kernel does not write (its first BLOCK_R columns of U, its bias) before it
    waits, then sums the partials. With store_h, program 0 also stores h; with N = 0 the grid is
    that one program and it only stores h.
    """
    # The next kernel may start: a programmatic dependent waits for this one before it reads (the
    # next call's first kernel only prefetches its weights meanwhile).
    launch_dependents()
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_M)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < N
    rc = tl.arange(0, BLOCK_R)
    u_cols = u_ptr + cols.to(tl.int64)[None, :] * su_n
    ut = tl.load(u_cols + rc[:, None], mask=c_ok[None, :] & (rc[:, None] < R), other=0.0)
    bias = tl.load(bias_ptr + cols, mask=c_ok & (has_bias != 0), other=0.0).to(tl.float32)
    wait_for_primary()
    store = (store_h != 0) & (pid == 0)
    h = _hidden_chunk(part_ptr, h_ptr, rows, rc, M, R, n_ksplit, store, sh_m, BLOCK_M, BLOCK_R, KS_UNROLL)
    out = _dot(h, ut, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
    for r0 in range(BLOCK_R, R, BLOCK_R):
        rr = r0 + rc
        ut = tl.load(u_cols + rr[:, None], mask=c_ok[None, :] & (rr[:, None] < R), other=0.0)
        h = _hidden_chunk(part_ptr, h_ptr, rows, rr, M, R, n_ksplit, store, sh_m, BLOCK_M, BLOCK_R, KS_UNROLL)
        out = _dot(h, ut, out)
    out += bias[None, :]
    y_out = y_ptr + rows.to(tl.int64)[:, None] * sy_m + cols[None, :]
    tl.store(y_out, out.to(y_ptr.dtype.element_ty), mask=(rows < M)[:, None] & c_ok[None, :])


# ---- C = A @ B.T (+ bias): the two-GEMM path --------------------------------------------------

def gemm_nt_reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    c = _rows_2d(a).float() @ b.float().T
    if bias is not None:
        c = c + bias.float()
    return c.to(a.dtype)


@triton.jit
def gemm_nt_kernel(
    a_ptr, b_ptr, bias_ptr, c_ptr,
    M, N, K, has_bias,
    a_inner, sa_outer, sa_inner, sb_n, sc_m,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # GROUP_M row blocks share each column block of B while it is in L2.
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * grid_n
    first_m = (pid // group_size) * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % size_m
    pid_n = (pid % group_size) // size_m

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    a_rows = a_ptr + _row_offsets(rows, a_inner, sa_outer, sa_inner)
    b_rows = b_ptr + cols.to(tl.int64) * sb_n
    acc = nt_tile(a_rows, b_rows, row_ok, col_ok, 0, K, BLOCK_M, BLOCK_N, BLOCK_K)
    if has_bias != 0:
        acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    c_out = c_ptr + rows.to(tl.int64)[:, None] * sc_m + cols[None, :]
    tl.store(c_out, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


# ---- weight gradients: dU = g.T @ h, dV = dh.T @ x, dbias = g.sum(0) --------------------------

def wgrad_reference(g, h, dh, x, with_bias):
    g2, x2 = _rows_2d(g).float(), _rows_2d(x).float()
    dU = (g2.T @ _rows_2d(h).float()).to(g.dtype)
    dV = (dh.float().T @ x2).to(g.dtype)
    return dU, dV, (g2.sum(0).to(g.dtype) if with_bias else None)


@triton.jit
def _tn_tile(
    a_ptr, b_ptr, c_ptr, db_ptr, M, P, Q, tile, p_fastest, with_db,
    a_inner, sa_outer, sa_inner, b_inner, sb_outer, sb_inner, sc_p,
    BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """C[P, Q] = A[M, P].T @ B[M, Q] for one output tile; with_db: also db[P] = A.sum(0).

    p_fastest orders the tiles so that consecutive programs share the larger operand's column
    block (read once from memory, then from L2).
    """
    n_p = tl.cdiv(P, BLOCK_P)
    n_q = tl.cdiv(Q, BLOCK_Q)
    if p_fastest:
        pb = tile % n_p
        qb = tile // n_p
    else:
        pb = tile // n_q
        qb = tile % n_q
    pp = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    qq = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
    p_ok = pp < P
    q_ok = qq < Q
    mm0 = tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_P, BLOCK_Q), dtype=tl.float32)
    db = tl.zeros((BLOCK_P,), dtype=tl.float32)
    for m0 in range(0, M, BLOCK_M):
        mm = m0 + mm0
        m_ok = mm < M
        a_rows = a_ptr + _row_offsets(mm, a_inner, sa_outer, sa_inner)
        b_rows = b_ptr + _row_offsets(mm, b_inner, sb_outer, sb_inner)
        at = tl.load(a_rows[None, :] + pp[:, None], mask=p_ok[:, None] & m_ok[None, :], other=0.0)
        b = tl.load(b_rows[:, None] + qq[None, :], mask=m_ok[:, None] & q_ok[None, :], other=0.0)
        acc = _dot(at, b, acc)
        if with_db:
            db += tl.sum(at.to(tl.float32), axis=1)
    c_out = c_ptr + pp.to(tl.int64)[:, None] * sc_p + qq[None, :]
    tl.store(c_out, acc.to(c_ptr.dtype.element_ty), mask=p_ok[:, None] & q_ok[None, :])
    if with_db:
        tl.store(db_ptr + pp, db.to(db_ptr.dtype.element_ty), mask=p_ok)


@triton.jit
def low_rank_wgrad_kernel(
    g_ptr, h_ptr, dh_ptr, x_ptr, du_ptr, dv_ptr, db_ptr,
    M, N, R, K, has_bias,
    g_inner, sg_outer, sg_inner, h_inner, sh_outer, sh_inner, sdh_m,
    x_inner, sx_outer, sx_inner, sdu_n, sdv_r,
    BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr,
):
    # Programs [0, tiles_u) compute dU tiles, the rest dV tiles: one launch fills the GPU where
    # either alone would not (both reduce over all M rows; their outputs are weight-sized). The
    # branch only picks operands, so the tile code is compiled once.
    pid = tl.program_id(0)
    tiles_u = tl.cdiv(N, BLOCK_P) * tl.cdiv(R, BLOCK_Q)
    is_dv = pid >= tiles_u
    if pid < tiles_u:
        # dU = g.T @ h. g (M x N) is the large operand: consecutive tiles share its column block.
        # dbias rides along on the tiles of the first R block, which read every g element once.
        a_ptr, b_ptr, c_ptr = g_ptr, h_ptr, du_ptr
        P, Q, tile, sc_p = N, R, pid, sdu_n
        a_inner, sa_outer, sa_inner = g_inner, sg_outer, sg_inner
        b_inner, sb_outer, sb_inner = h_inner, sh_outer, sh_inner
        with_db = (has_bias != 0) & (pid % tl.cdiv(R, BLOCK_Q) == 0)
    else:
        # dV = dh.T @ x. x (M x K) is the large operand.
        a_ptr, b_ptr, c_ptr = dh_ptr, x_ptr, dv_ptr
        P, Q, tile, sc_p = R, K, pid - tiles_u, sdv_r
        a_inner, sa_outer, sa_inner = M, sdh_m * 0, sdh_m
        b_inner, sb_outer, sb_inner = x_inner, sx_outer, sx_inner
        with_db = has_bias < 0
    _tn_tile(a_ptr, b_ptr, c_ptr, db_ptr, M, P, Q, tile, is_dv, with_db,
             a_inner, sa_outer, sa_inner, b_inner, sb_outer, sb_inner, sc_p,
             BLOCK_P, BLOCK_Q, BLOCK_M)

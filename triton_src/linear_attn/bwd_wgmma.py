"""The causal backward's walks in Gluon, for Hopper (sm_90a only): dq (la_bwd_dq_kernel's arguments
and results: den and dl from the stats pass, or under STATS computed and written here) and dk with dv
(la_bwd_dk_kernel's with WITH_DV: no dv pass), for bf16 tensors with one feature part (FEAT > 0) at
64 and 128 features and value columns (spec.py WGMMA_BWD_TILES; STATS at both, _wgmma_dq_built).
One program holds all of F and all of Dv, so each grid has one tile: (H / Hkv) x G x B*Hkv for dq,
G x B*Hkv for dk with dv. csrc/ops/linear_attn.cpp takes them where they are built for the device
(and D and Dv take the same block) and keeps the Triton kernels elsewhere.

Why: at 128 features the Triton dq and dk tile F by 32 and dv tiles Dv by 64 (wider tiles spill), so
each row block is read and its products recomputed by two to four programs, and the intra-chunk dots
run as mma.sync; fwd_wgmma.py's reasons, and its remedy: 64-row chunks, every product a wgmma,
independent ones issued together. At 64 the Triton kernels already hold all of F (and fuse the
same way), but each tl.dot waits for its product: on the H200 at B4 H16 N4096 D64, dq with the
stats 126.6 -> 97.2 us and dk with dv 127.6 -> 115.0 us here.

dq, per chunk of C rows in forward order, with S, z the forward state before the chunk (S's bf16 hi
and lo halves in shared memory: one bf16 rounding of S costs dq of the normalized maps the whole
bf16 tolerance, kernels._mm_state), g_i = dout_i / den_i and r_i = -(dout_i . out_i) / den_i:
    gq = dout S^T,  ds = dout v^T,  S += kf^T v          (issued together)
    gq += r z^T + (tril(ds) + r) kf                      (1 / den_i left to the store)
    dq = gq * scale / den_i * phi'(q)
STATS computes den and dout_i . out_i in dq's chunk, so that no stats pass runs, from one product
more, A = qf kf^T (issued with the others): den_i = qf_i . z + rowsum(tril(A))_i + eps as the
forward has it, and, before gq and ds take r, dout_i . (qf_i S + (tril(A) v)_i) =
qf_i . gq_i + rowsum(tril(A) * ds)_i. The forward's own products (qf S and tril(A) v) are not run:
8 wgmma groups a chunk become 6, and dout . out takes S in both halves where the forward's out took
its hi half (a difference of one bf16 rounding of S, inside the tolerance the hi + lo split keeps
for dq).
dk and dv: _reverse_walk (later chunks first, each chunk once per query head of the kv head).
Rows past N and padded feature columns load as zeros. Only elu+1's padded columns of qg need zeroing
(the reverse walks contract over features with them); otherwise a padded column of kf or qg reaches
only the same padded column of a result (never stored), rows past N meet zero rows of v and dout,
and tril / triu keep them out of every row that exists. The naive reference is
kernels.attention_reference under autograd, as for the Triton kernels.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, warpgroup_mma, warpgroup_mma_init,
                                                                 warpgroup_mma_wait)

from triton_src.linear_attn.fwd_wgmma import _issue_tile, _launch_dependents, _phi, _start_state, _wait_for_primary


@gluon.jit
def _dphi(x, FEAT: gl.constexpr):
    """phi'(x) for elu+1 (FEAT 2) and relu (3); identity's is 1 and never computed."""
    if FEAT == 2:
        y = gl.where(x > 0, 1.0, gl.exp2(x * 1.4426950408889634))
    else:
        y = gl.where(x > 0, 1.0, 0.0)
    return y


@gluon.jit
def _dphi_of_phi(f, FEAT: gl.constexpr):
    """phi'(x) from f = phi(x): elu+1's is min(f, 1) (exp(x) <= 1 below 0, else 1), relu's f > 0."""
    if FEAT == 2:
        y = gl.minimum(f, 1.0)
    else:
        y = gl.where(f > 0, 1.0, 0.0)
    return y


@gluon.jit
def _row_scales(den_ptr, dl_ptr, bh, rows, N, normalize):
    """kernels._row_grad_scales: (1 / den_i, -(dout_i . out_i)), or (1, 0) unnormalized."""
    m = (rows < N) & (normalize != 0)
    inv = 1.0 / gl.load(den_ptr + bh * N + rows, mask=m, other=1.0)
    return inv, -gl.load(dl_ptr + bh * N + rows, mask=m, other=0.0)


@gluon.jit
def _issue_scales(dst, den_ptr, dl_ptr, bh, c0, N, normalize, on, DL: gl.constexpr, layout: gl.constexpr):
    """cp.async of the den (dst[:C]) and, with DL, dl (dst[C:]) of the chunk's rows c0 + [0, C) into
    dst [2 * C], in a 1-D layout: the reverse walks read them a chunk after they are issued, as they
    read the tiles. Rows that are masked off (past N, unnormalized, not `on`) land as zeros;
    _slot_scales gives them (1, 0)."""
    C: gl.constexpr = dst.shape[0] // 2
    j = gl.arange(0, 2 * C, layout=layout)
    rows = c0 + j % C
    m = (rows < N) & on & (normalize != 0) & ((j < C) | (DL != 0))
    cp.async_load(dst, gl.where(j < C, den_ptr, dl_ptr) + (bh * N + rows), mask=m)


@gluon.jit
def _slot_scales(src, rows, N, normalize, layout: gl.constexpr):
    """_row_scales from a slot that _issue_scales filled, in `layout` (a 1-D slice layout)."""
    C: gl.constexpr = src.shape[0] // 2
    m = (rows < N) & (normalize != 0)
    inv = 1.0 / gl.where(m, src.slice(0, C).load(layout), 1.0)
    return inv, -gl.where(m, src.slice(C, C).load(layout), 0.0)


@gluon.jit
def _next_pair(c0, rep, n_rep, C: gl.constexpr):
    """The reverse walks' pair after (chunk rows from c0, head rep of the group): the group's next
    head, after its last the chunk before. Counted rather than divided out of a pair index: two
    integer divisions a chunk were about 3% of the walk's instructions."""
    last = rep == n_rep - 1
    return gl.where(last, c0 - C, c0), gl.where(last, 0, rep + 1)


@gluon.jit
def la_bwd_dq_wgmma_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, dq_ptr, wc_ptr, ws_ptr,
    s_ptr, z_ptr, den_ptr, dl_ptr,
    H, HKV, N, D, DV, DS, DVS, G, L,
    phi_kind, normalize, n_parts, has_s,
    scale, eps,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, sd_b, sd_h, sd_n, sdq_b, sdq_h, sdq_n,
    sw_b, ss_bh, ss_g, sz_bh, sz_g,
    C: gl.constexpr, CAUSAL: gl.constexpr, BF: gl.constexpr, BKV: gl.constexpr, PREC: gl.constexpr,
    FEAT: gl.constexpr, STATS: gl.constexpr, STAGES: gl.constexpr,
):
    """la_bwd_dq_kernel's arguments; wc, ws, phi_kind and n_parts are unused (one part, the map
    compiled in). STATS = 0: den and dl come from the stats pass (eps unused); STATS = 1 (normalized
    maps): the program computes and writes them itself, as la_bwd_dq_kernel's STATS. Grid:
    (H / Hkv) x G x B*Hkv (fastest first)."""
    gl.static_assert(CAUSAL == 1 and PREC == 1 and FEAT > 0, "the causal bf16 dq with one feature part")
    gl.static_assert(C == 64 and BF == BKV and BF >= 64, "64-row chunks, as many features as value columns")
    _wait_for_primary()  # first: the state, den and dl below are the previous kernels' outputs
    NW: gl.constexpr = gl.num_warps()
    WN: gl.constexpr = NW // 4  # warpgroups, side by side along each product's columns
    TK: gl.constexpr = BF // 8 if BF // 8 < 32 else 32  # 8 contiguous bf16 (16 bytes) per thread
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TK, TK], [NW, 1], [1, 0])
    mma_a: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, C // WN, 16])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, BF // WN, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    qa_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_a, k_width=2)
    nv: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    raw: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
    row: gl.constexpr = gl.SliceLayout(1, mma)

    n_rep = H // HKV
    pid = gl.program_id(0)
    r = pid % n_rep
    g = (pid // n_rep) % G
    bk = pid // n_rep // G
    b = (bk // HKV).to(gl.int64)
    hk = bk % HKV
    h = hk * n_rep + r
    bh = b * H + h
    qb = q_ptr + b * sq_b + h * sq_h
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    db = do_ptr + b * sd_b + h * sd_h
    dqb = dq_ptr + b * sdq_b + h * sdq_h

    S, z = _start_state(s_ptr, z_ptr, bk, g, has_s, ss_bh, ss_g, sz_bh, sz_g, 0, DS, DVS, BF, BKV, mma,
                        gl.SliceLayout(0, ld))

    k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BF], raw)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BKV], nv)
    d_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BKV], nv)
    Q_ON: gl.constexpr = (FEAT != 1) | (STATS != 0)  # q for phi'(q) (identity's is 1) and the stats' qf
    if Q_ON:
        q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BF], raw)
    kf_s = gl.allocate_shared_memory(gl.bfloat16, [C, BF], nv)
    sh_s = gl.allocate_shared_memory(gl.bfloat16, [BF, BKV], nv)
    sl_s = gl.allocate_shared_memory(gl.bfloat16, [BF, BKV], nv)
    # STATS's qf, the A operand of qf kf^T: through shared memory at 64 features (from registers,
    # with its features computed again for den and dout . out: 1914 against 1829 instructions a
    # chunk under elu+1, and a spill), from registers at 128, where a shared copy would take the
    # kernel 1 KB past sm_90's 227 KB.
    QF_SHARED: gl.constexpr = BF <= 64
    if STATS and QF_SHARED:
        qf_s = gl.allocate_shared_memory(gl.bfloat16, [C, BF], nv)

    ci = gl.arange(0, C, layout=gl.SliceLayout(1, ld))
    cd = gl.arange(0, BF, layout=gl.SliceLayout(0, ld))
    r0 = g * L
    n_chunks = gl.cdiv(gl.minimum(L, N - r0), C)
    for i in gl.static_range(STAGES - 1):
        ld_rows = r0 + i * C + ci
        _issue_tile(k_s.index(i), kb, ld_rows, cd, N, D, sk_n, i < n_chunks)
        _issue_tile(v_s.index(i), vb, ld_rows, cd, N, DV, sv_n, i < n_chunks)
        _issue_tile(d_s.index(i), db, ld_rows, cd, N, DV, sd_n, i < n_chunks)
        if Q_ON:
            _issue_tile(q_s.index(i), qb, ld_rows, cd, N, D, sq_n, i < n_chunks)
        cp.commit_group()

    hi = S.to(gl.bfloat16)
    sh_s.store(hi)
    sl_s.store((S - hi.to(gl.float32)).to(gl.bfloat16))
    fence_async_shared()

    ai = gl.arange(0, C, layout=gl.SliceLayout(1, mma_a))
    aj = gl.arange(0, C, layout=gl.SliceLayout(0, mma_a))
    causal = ai[:, None] >= aj[None, :]
    oi = gl.arange(0, C, layout=row)
    oj = gl.arange(0, BF, layout=gl.SliceLayout(0, mma))
    zero_q = gl.zeros([C, BF], gl.float32, mma)
    zero_a = gl.zeros([C, C], gl.float32, mma_a)
    f_on = gl.where(cd < D, 1.0, 0.0)
    for it in range(n_chunks):
        nxt = it + STAGES - 1
        s_nxt = nxt % STAGES
        ld_rows = r0 + nxt * C + ci
        _issue_tile(k_s.index(s_nxt), kb, ld_rows, cd, N, D, sk_n, nxt < n_chunks)
        _issue_tile(v_s.index(s_nxt), vb, ld_rows, cd, N, DV, sv_n, nxt < n_chunks)
        _issue_tile(d_s.index(s_nxt), db, ld_rows, cd, N, DV, sd_n, nxt < n_chunks)
        if Q_ON:
            _issue_tile(q_s.index(s_nxt), qb, ld_rows, cd, N, D, sq_n, nxt < n_chunks)
        cp.commit_group()
        cp.wait_group(STAGES - 1)  # this chunk's copies have landed
        slot = it % STAGES
        kf = _phi(k_s.index(slot).load(ld).to(gl.float32), FEAT)
        dt = d_s.index(slot)
        vt = v_s.index(slot)
        rows = r0 + it * C + oi
        if STATS:  # elu+1 maps the zeros loaded for padding to 1: zero qf's, or where qf stays
            if QF_SHARED:  # in the layouts of its products, kf's, which they all contract against
                qf = _phi(q_s.index(slot).load(ld).to(gl.float32), FEAT)
                if FEAT == 2:
                    qf = qf * f_on[None, :]
                qf_s.store(qf.to(gl.bfloat16))
                qa = qf_s
            else:
                if FEAT == 2:
                    kf = kf * f_on[None, :]
                qa = _phi(q_s.index(slot).load(qa_op).to(gl.float32), FEAT).to(gl.bfloat16)
                # At 128 features, kf's last use before the products and qf (qm) loaded after their
                # wait: held across them, both spilled (stack 40 / 48 bytes under identity / elu+1,
                # now 0 / 8). H200, B1 H16 N65536 D128, dq 881 -> 832 us (elu+1), 738 -> 693 (identity),
                # 757 -> 725 (relu).
                zq = gl.convert_layout(z, gl.SliceLayout(0, mma))  # z before this chunk
                z += gl.sum(kf, 0)
        kf_s.store(kf.to(gl.bfloat16))
        fence_async_shared()
        gq = warpgroup_mma(dt, sh_s.permute((1, 0)), zero_q, use_acc=False, is_async=True)
        gq = warpgroup_mma(dt, sl_s.permute((1, 0)), gq, is_async=True)
        ds = warpgroup_mma(dt, vt.permute((1, 0)), zero_a, use_acc=False, is_async=True)
        if STATS:
            a = warpgroup_mma(qa, kf_s.permute((1, 0)), zero_a, use_acc=False, is_async=True)
        S = warpgroup_mma(kf_s.permute((1, 0)), vt, S, is_async=True)
        if STATS:
            if QF_SHARED:
                zq = gl.convert_layout(z, gl.SliceLayout(0, mma))  # z before this chunk
                den_z = gl.convert_layout(gl.sum(qf * z[None, :], 1), row)
                qm = qf_s.load(mma).to(gl.float32)
                z += gl.sum(kf, 0)
            gq, ds, a = warpgroup_mma_wait(1, deps=(gq, ds, a))  # the state update may still run
            if not QF_SHARED:
                qm = _phi(q_s.index(slot).load(mma).to(gl.float32), FEAT)
                den_z = gl.sum(qm * zq[None, :], 1)
            # The forward's den_i with eps, and dl_i = dout_i . out_i from gq and ds before they
            # take r: dout_i . (qf_i S) = qf_i . gq_i and dout_i . (tril(A) v)_i = rowsum(tril(A) * ds)_i.
            a = gl.where(causal, a, 0.0)
            den = (den_z + gl.convert_layout(gl.sum(a, 1), row)) * scale + eps
            inv = 1.0 / den
            dl = (gl.sum(qm * gq, 1) + gl.convert_layout(gl.sum(a * ds, 1), row)) * (scale * inv)
            r_ok = rows < N
            gl.store(den_ptr + bh * N + rows, den, mask=r_ok)
            gl.store(dl_ptr + bh * N + rows, dl, mask=r_ok)
            ndl = -dl
        else:
            inv, ndl = _row_scales(den_ptr, dl_ptr, bh, rows, N, normalize)
            zq = gl.convert_layout(z, gl.SliceLayout(0, mma))
            z += gl.sum(kf, 0)
            gq, ds = warpgroup_mma_wait(1, deps=(gq, ds))  # the state update may still run
        ds = gl.where(causal, ds + gl.convert_layout(ndl, gl.SliceLayout(1, mma_a))[:, None], 0.0)
        gq += ndl[:, None] * zq[None, :]
        gq = warpgroup_mma(gl.convert_layout(ds.to(gl.bfloat16), a_op), kf_s, gq, is_async=True)
        gq, S = warpgroup_mma_wait(0, deps=(gq, S))
        hi = S.to(gl.bfloat16)  # the halves of this chunk's gq have been read: they may be replaced
        sh_s.store(hi)
        sl_s.store((S - hi.to(gl.float32)).to(gl.bfloat16))
        fence_async_shared()
        dq = gq * (scale * inv)[:, None]
        if FEAT != 1:
            dq = dq * _dphi(q_s.index(slot).load(mma).to(gl.float32), FEAT)
        d_mask = (rows < N)[:, None] & (oj < D)[None, :]
        gl.store(dqb + rows[:, None].to(gl.int64) * sdq_n + oj[None, :], dq.to(gl.bfloat16), mask=d_mask)
    cp.wait_group(0)  # no copy may still target shared memory as the program exits
    _launch_dependents()  # last: the next kernel may be scheduled as this grid drains


@gluon.jit
def _reverse_walk(q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, r_ptr, rz_ptr, den_ptr, dl_ptr,
                  H, HKV, N, D, DV, DS, DVS, G, L, normalize, has_r, scale,
                  sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, sd_b, sd_h, sd_n, sdk_b, sdk_h, sdk_n,
                  sdv_b, sdv_h, sdv_n, sr_bh, sr_g, srz_bh, srz_g,
                  C: gl.constexpr, BK: gl.constexpr, FEAT: gl.constexpr, STAGES: gl.constexpr):
    """dk and dv (la_bwd_dk_kernel's WITH_DV) in one reverse walk over (chunk, query head of the
    group) pairs, later chunks first, from the reverse state R and rho at segment g; all of F and Dv
    (BK each) in one program. Per pair, with qg = qf / den (padded feature columns zeroed: elu+1 maps
    them to 1) and R's bf16 hi and lo halves in shared memory:
        dv: acc_v = kf R (first head),  at = kf qg^T,  acc_v += triu(at) dout
        dk: acc = v R^T + rho (first head),  dst = v dout^T,  acc += (triu(dst + r^T)) qg
        R += qg^T dout (issued with the products above),  rho += qg^T r
    and the group's last head stores both (dk through phi'(k)). One walk for both, since separate dv
    and dk walks would each read q, k and grad_out and repeat R's update."""
    NW: gl.constexpr = gl.num_warps()
    WN: gl.constexpr = NW // 4
    TK: gl.constexpr = BK // 8 if BK // 8 < 32 else 32
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TK, TK], [NW, 1], [1, 0])
    mma_a: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, C // WN, 16])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, BK // WN, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    nv: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    raw: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
    sc: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])  # a chunk's den and dl, [2 * C]
    flat: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])

    n_rep = H // HKV
    pid = gl.program_id(0)
    g = pid % G
    bk = pid // G
    b = (bk // HKV).to(gl.int64)
    hk = bk % HKV
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    # At 128 features the copies take their offsets within the head in 32 bits (the op runs the
    # Gluon backward only where (N - 1) * stride + width < 2^31, csrc rows_fit_int32): H200, B1 H16
    # N65536, dv 632.6 -> 608.6 us and dk 670.4 -> 642.6 us (as separate walks). The same at 64 and
    # in the forward's walk cost 1% and 4%, although their chunk loops lost 5% and 2% of their
    # instructions.
    if BK >= 128:
        sq_n = sq_n.to(gl.int32)
        sd_n = sd_n.to(gl.int32)
        sv_n = sv_n.to(gl.int32)
        sk_n = sk_n.to(gl.int32)

    R, rho = _start_state(r_ptr, rz_ptr, bk, g, has_r, sr_bh, sr_g, srz_bh, srz_g, 0, DS, DVS, BK, BK, mma,
                          gl.SliceLayout(0, ld))

    # At 128 features kf is written over k's tile (phi'(k) then comes from kf): a [C, BK] kf buffer
    # of its own took the block 2 KB past sm_90's 227 KB.
    KF_IN_K: gl.constexpr = BK >= 128
    q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BK], raw)
    d_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BK], nv)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BK], nv)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BK], nv if KF_IN_K else raw)
    if not KF_IN_K:
        kf_s = gl.allocate_shared_memory(gl.bfloat16, [C, BK], nv)
    qg_s = gl.allocate_shared_memory(gl.bfloat16, [C, BK], nv)
    rh_s = gl.allocate_shared_memory(gl.bfloat16, [BK, BK], nv)
    rl_s = gl.allocate_shared_memory(gl.bfloat16, [BK, BK], nv)
    # den and dl arrive with the tiles, so the chunk's scales wait on no load from global memory
    # (ncu, dk with dv at B4 H16 N4096 D64: that wait was 5% of the walk's stall samples).
    sc_s = gl.allocate_shared_memory(gl.float32, [STAGES, 2 * C], flat)

    ci = gl.arange(0, C, layout=gl.SliceLayout(1, ld))
    cd = gl.arange(0, BK, layout=gl.SliceLayout(0, ld))
    s0 = g * L
    n_ch = gl.cdiv(gl.minimum(s0 + L, N) - s0, C)
    n_it = n_ch * n_rep
    # The pair whose copies are issued (ld_c0, ld_rep) runs STAGES - 1 ahead of the one computed (c0, rep).
    c0 = s0 + (n_ch - 1) * C
    rep = gl.to_tensor(0)
    ld_c0 = c0
    ld_rep = rep
    for i in gl.static_range(STAGES - 1):
        ld_rows = ld_c0 + ci
        ld_h = hk * n_rep + ld_rep
        on = i < n_it
        _issue_tile(q_s.index(i), q_ptr + b * sq_b + ld_h * sq_h, ld_rows, cd, N, D, sq_n, on)
        _issue_tile(d_s.index(i), do_ptr + b * sd_b + ld_h * sd_h, ld_rows, cd, N, DV, sd_n, on)
        _issue_tile(v_s.index(i), vb, ld_rows, cd, N, DV, sv_n, on)
        _issue_tile(k_s.index(i), kb, ld_rows, cd, N, D, sk_n, on)
        _issue_scales(sc_s.index(i), den_ptr, dl_ptr, b * H + ld_h, ld_c0, N, normalize, on, 1, sc)
        cp.commit_group()
        ld_c0, ld_rep = _next_pair(ld_c0, ld_rep, n_rep, C)

    hi = R.to(gl.bfloat16)
    rh_s.store(hi)
    rl_s.store((R - hi.to(gl.float32)).to(gl.bfloat16))
    fence_async_shared()

    ai = gl.arange(0, C, layout=gl.SliceLayout(1, mma_a))
    aj = gl.arange(0, C, layout=gl.SliceLayout(0, mma_a))
    later = aj[None, :] >= ai[:, None]  # [j, i]: query row i at or after key row j
    oi = gl.arange(0, C, layout=gl.SliceLayout(1, mma))
    oj = gl.arange(0, BK, layout=gl.SliceLayout(0, mma))
    zero_o = gl.zeros([C, BK], gl.float32, mma)
    zero_a = gl.zeros([C, C], gl.float32, mma_a)
    f_on = gl.where(cd < D, 1.0, 0.0)
    acc = zero_o
    acc_v = zero_o
    for it in range(n_it):
        nxt = it + STAGES - 1
        s_nxt = nxt % STAGES
        ld_rows = ld_c0 + ci
        ld_h = hk * n_rep + ld_rep
        on = nxt < n_it
        _issue_tile(q_s.index(s_nxt), q_ptr + b * sq_b + ld_h * sq_h, ld_rows, cd, N, D, sq_n, on)
        _issue_tile(d_s.index(s_nxt), do_ptr + b * sd_b + ld_h * sd_h, ld_rows, cd, N, DV, sd_n, on)
        _issue_tile(v_s.index(s_nxt), vb, ld_rows, cd, N, DV, sv_n, on)
        _issue_tile(k_s.index(s_nxt), kb, ld_rows, cd, N, D, sk_n, on)
        _issue_scales(sc_s.index(s_nxt), den_ptr, dl_ptr, b * H + ld_h, ld_c0, N, normalize, on, 1, sc)
        cp.commit_group()
        ld_c0, ld_rep = _next_pair(ld_c0, ld_rep, n_rep, C)
        cp.wait_group(STAGES - 1)  # this pair's copies have landed
        slot = it % STAGES
        inv_l, ndl_l = _slot_scales(sc_s.index(slot), c0 + ci, N, normalize, gl.SliceLayout(1, ld))
        qg = _phi(q_s.index(slot).load(ld).to(gl.float32), FEAT) * f_on[None, :] * (scale * inv_l)[:, None]
        qg_s.store(qg.to(gl.bfloat16))
        dt = d_s.index(slot)
        rho_next = rho + gl.sum(qg * ndl_l[:, None], 0)  # here, so that qg is not live across the products
        if KF_IN_K:
            kf_s = k_s.index(slot)
            if FEAT != 1:  # each thread rewrites the elements it read
                kf_s.store(_phi(kf_s.load(ld).to(gl.float32), FEAT).to(gl.bfloat16))
        else:
            kf_s.store(_phi(k_s.index(slot).load(ld).to(gl.float32), FEAT).to(gl.bfloat16))
        fence_async_shared()
        vt = v_s.index(slot)
        if rep == 0:
            # The first head's products start from rho in dk's accumulator and complete at the wait
            # for pr: no wait of their own. H200: dk with dv 104.4 -> 101.0 us at B4 H16 N4096 D64;
            # dv 613.2 -> 606.2 us and dk 645.8 -> 640.6 at B1 H16 N65536 D128 (as separate walks).
            acc_t = warpgroup_mma(vt, rh_s.permute((1, 0)),
                                  zero_o + gl.convert_layout(rho, gl.SliceLayout(0, mma))[None, :], is_async=True)
            acc_t = warpgroup_mma(vt, rl_s.permute((1, 0)), acc_t, is_async=True)
            acc_vt = warpgroup_mma(kf_s, rh_s, zero_o, use_acc=False, is_async=True)
            acc_vt = warpgroup_mma(kf_s, rl_s, acc_vt, is_async=True)
        else:
            acc_t = warpgroup_mma_init(acc)
            acc_vt = warpgroup_mma_init(acc_v)
        rho = rho_next
        pr = warpgroup_mma(vt, dt.permute((1, 0)), zero_a, use_acc=False, is_async=True)
        at = warpgroup_mma(kf_s, qg_s.permute((1, 0)), zero_a, use_acc=False, is_async=True)
        R = warpgroup_mma(qg_s.permute((1, 0)), dt, R, is_async=True)
        pr, at = warpgroup_mma_wait(1, deps=(pr, at))  # the state update may still run
        # r for the chunk's key columns, read after the products: it spilled across them
        _, ndl_a = _slot_scales(sc_s.index(slot), c0 + aj, N, normalize, gl.SliceLayout(0, mma_a))
        pr = gl.where(later, pr + ndl_a[None, :], 0.0)
        acc = warpgroup_mma(gl.convert_layout(pr.to(gl.bfloat16), a_op), qg_s, acc_t, is_async=True)
        at = gl.where(later, at, 0.0)
        acc_v = warpgroup_mma(gl.convert_layout(at.to(gl.bfloat16), a_op), dt, acc_vt, is_async=True)
        acc, acc_v, R = warpgroup_mma_wait(0, deps=(acc, acc_v, R))
        hi = R.to(gl.bfloat16)  # the halves' readers have completed: they may be replaced
        rh_s.store(hi)
        rl_s.store((R - hi.to(gl.float32)).to(gl.bfloat16))
        fence_async_shared()
        if rep == n_rep - 1:  # the group's last head: the rows are complete
            rows = c0 + oi
            out = acc
            if FEAT != 1:
                if KF_IN_K:
                    out = out * _dphi_of_phi(k_s.index(slot).load(mma).to(gl.float32), FEAT)
                else:
                    out = out * _dphi(k_s.index(slot).load(mma).to(gl.float32), FEAT)
            k_mask = (rows < N)[:, None] & (oj < D)[None, :]
            gl.store(dk_ptr + b * sdk_b + hk * sdk_h + rows[:, None].to(gl.int64) * sdk_n + oj[None, :],
                     out.to(gl.bfloat16), mask=k_mask)
            v_mask = (rows < N)[:, None] & (oj < DV)[None, :]
            gl.store(dv_ptr + b * sdv_b + hk * sdv_h + rows[:, None].to(gl.int64) * sdv_n + oj[None, :],
                     acc_v.to(gl.bfloat16), mask=v_mask)
        c0, rep = _next_pair(c0, rep, n_rep, C)
    cp.wait_group(0)  # no copy may still target shared memory as the program exits


@gluon.jit
def la_bwd_dk_wgmma_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, wc_ptr, ws_ptr, r_ptr, rz_ptr, den_ptr, dl_ptr,
    H, HKV, N, D, DV, DS, DVS, G, L,
    phi_kind, normalize, n_parts, has_r,
    scale,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, sd_b, sd_h, sd_n, sdk_b, sdk_h, sdk_n,
    sdv_b, sdv_h, sdv_n,
    sw_b, sr_bh, sr_g, srz_bh, srz_g,
    C: gl.constexpr, CAUSAL: gl.constexpr, BF: gl.constexpr, BKV: gl.constexpr, PREC: gl.constexpr,
    FEAT: gl.constexpr, STAGES: gl.constexpr,
):
    """la_bwd_dk_kernel's arguments (causal) with WITH_DV: dk and dv; wc, ws, phi_kind and n_parts are
    unused. All of F in one program: grid G x B*Hkv (fastest first)."""
    gl.static_assert(CAUSAL == 1 and PREC == 1 and FEAT > 0, "the causal bf16 dk with one part")
    gl.static_assert(C == 64 and BF == BKV and BF >= 64, "64-row chunks, as many features as value columns")
    _wait_for_primary()  # first: R, rho, den and dl are the previous kernels' outputs
    _reverse_walk(q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, r_ptr, rz_ptr, den_ptr, dl_ptr,
                  H, HKV, N, D, DV, DS, DVS, G, L, normalize, has_r, scale,
                  sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, sd_b, sd_h, sd_n, sdk_b, sdk_h, sdk_n,
                  sdv_b, sdv_h, sdv_n, sr_bh, sr_g, srz_bh, srz_g, C, BF, FEAT, STAGES)
    _launch_dependents()  # last: the next kernel may be scheduled as this grid drains

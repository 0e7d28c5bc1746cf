"""The forward walks of kernels.la_fwd_kernel in Gluon, for Hopper (sm_90a only): same arguments,
grid and results, for bf16 tensors with one feature part (FEAT > 0). Causal: the plain forward and,
as the STATS variant, the backward's stats pass (den_i and dout_i . out_i where dq does not compute
them itself: where D and Dv fall in different blocks, so that Gluon's dq does not run).
Bidirectional (_fixed_state_walk): the plain forward at 256 features. csrc/ops/linear_attn.cpp
takes them where they are built for the device and keeps la_fwd_kernel for everything else (other
dtypes, Cosformer, the bidirectional forward below 256 features and its stats pass).

Why a second form of the same walk: Triton's tl.dot waits for each wgmma before the next
instruction, and at 128 features the Triton walk takes 32-row chunks (wider ones spill) whose
intra-chunk dots are too narrow for wgmma (M < 64) and run as mma.sync. Here every product is a
wgmma on 64-row chunks: the chunk's qf S, qf kf^T and the state update kf^T v are issued together,
the first two waited for before A v is issued, and the rest at the chunk's end. H200, bf16, causal,
elu+1 (benchmarks/results/linear_attn.md, eighteenth session), the walk alone against
la_fwd_kernel's: B1 H16 N65536 D128 772 -> 550 us, B4 H16 N2048 D128 107 -> 76 us, B4 H16 N4096
D64 55.3 -> 51.5-55.1 us; whole forward calls 0.952 -> 0.723, 0.144 -> 0.116 and 0.0844 -> 0.0830 ms.

Per chunk of C rows (the state S, z before it; S's bf16 copy in shared memory for qf S):
    o = qf S,  A = qf kf^T,  S += kf^T v          (issued together)
    den = qf . z + rowsum(tril(A)) + eps,  z += colsum(kf)
    o += tril(A) v                                (A from registers)
    out = o / den   (or o, unnormalized; scale applied per row)
q, k and v reach shared memory through cp.async, STAGES - 1 chunks ahead; rows past N and padded
feature columns load as zeros (see the loop for what elu+1, whose phi(0) is 1, does about them).
The naive reference is kernels.attention_reference, as for la_fwd_kernel; the GPU tests run this
kernel wherever they run la_fwd_kernel's causal bf16 cases on an sm_90 device.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait


@gluon.jit
def _wait_for_primary():
    """grid_dependency.wait_for_primary for Gluon (this kernel is built for sm_90 only)."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _launch_dependents():
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def _phi(x, FEAT: gl.constexpr):
    """kernels._phi with the map compiled in: identity (FEAT 1), elu+1 (2), relu (3)."""
    if FEAT == 1:
        y = x
    elif FEAT == 2:
        y = gl.where(x > 0, x + 1.0, gl.exp2(x * 1.4426950408889634))
    else:
        y = gl.maximum(x, 0.0)
    return y


@gluon.jit
def _issue_tile(dst, base, rows, cols, N, W, sn, on):
    """cp.async of the tile `rows` x `cols` of a row-major input into dst (zeros past N and W;
    nothing where not `on`). sn is the row stride: int64, or int32 where the caller takes the
    offsets within the head in 32 bits (bwd_wgmma._reverse_walk at 128 features)."""
    mask = ((rows < N) & on)[:, None] & (cols < W)[None, :]
    cp.async_load(dst, base + (rows[:, None].to(sn.dtype) * sn + cols[None, :]), mask=mask)


@gluon.jit
def _issue_chunk(q_s, k_s, v_s, qb, kb, vb, rows, rows_v, cd, cv, N, D, DV, sq_n, sk_n, sv_n, slot, on):
    """cp.async of one chunk's q and k [C, BK] and v [C, BT] tiles into ring slot `slot` (rows and
    rows_v: the chunk's rows in the layouts of cd's and cv's tiles, which differ where BT < BK)."""
    _issue_tile(q_s.index(slot), qb, rows, cd, N, D, sq_n, on)
    _issue_tile(k_s.index(slot), kb, rows, cd, N, D, sk_n, on)
    _issue_tile(v_s.index(slot), vb, rows_v, cv, N, DV, sv_n, on)


@gluon.jit
def _chunk(qf, kf, qf_s, kf_s, st_s, vt, S, z, zero_o, zero_a, causal, a_op: gl.constexpr, row: gl.constexpr):
    """One chunk's products (the module doc's order): (o, S, z after the chunk, den without eps),
    o and den still unscaled. st_s holds S's bf16 copy before the chunk and after it on return."""
    qf_s.store(qf.to(gl.bfloat16))
    kf_s.store(kf.to(gl.bfloat16))
    fence_async_shared()
    o = warpgroup_mma(qf_s, st_s, zero_o, use_acc=False, is_async=True)
    a = warpgroup_mma(qf_s, kf_s.permute((1, 0)), zero_a, use_acc=False, is_async=True)
    S = warpgroup_mma(kf_s.permute((1, 0)), vt, S, is_async=True)
    den_z = gl.sum(qf * z[None, :], 1)
    z += gl.sum(kf, 0)
    o, a = warpgroup_mma_wait(1, deps=(o, a))  # the state update may still run
    a = gl.where(causal, a, 0.0)
    den_a = gl.sum(a, 1)
    o = warpgroup_mma(gl.convert_layout(a.to(gl.bfloat16), a_op), vt, o, is_async=True)
    o, S = warpgroup_mma_wait(0, deps=(o, S))
    st_s.store(S.to(gl.bfloat16))  # qf S of this chunk has completed: the copy may be replaced
    fence_async_shared()
    return o, S, z, gl.convert_layout(den_a, row) + gl.convert_layout(den_z, row)


@gluon.jit
def _segment_state(s_ptr, z_ptr, bk, g, has_s, ss_bh, ss_g, sz_bh, sz_g, t, DS, DVS,
                   BK: gl.constexpr, BT: gl.constexpr, layout: gl.constexpr, z_layout: gl.constexpr):
    """kernels._segment_state (causal): S [BK, BT] in `layout`, z [BK] in `z_layout`."""
    si = gl.arange(0, BK, layout=gl.SliceLayout(1, layout))
    sj = t * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, layout))
    st_mask = (si < DS)[:, None] & (sj < DVS)[None, :]
    st_offs = si[:, None] * DVS + sj[None, :]
    cz = gl.arange(0, BK, layout=z_layout)
    z_mask = cz < DS
    s_base = s_ptr + bk.to(gl.int64) * ss_bh
    z_base = z_ptr + bk.to(gl.int64) * sz_bh
    if BK <= 64 and BT <= 64:  # kernels.FOLD_MAX_BLOCK: these variants fold the scan (has_s >= 2)
        j0 = gl.where(has_s >= 2, 0, g)
        j1 = gl.where(has_s >= 2, g * (has_s - 1), g + 1)
        on = (has_s != 0) & (j0 < j1)
        S = gl.load(s_base + j0 * ss_g + st_offs, mask=st_mask & on, other=0.0)
        z = gl.load(z_base + j0 * sz_g + cz, mask=z_mask & on, other=0.0)
        for j in range(j0 + 1, j1):
            S += gl.load(s_base + j * ss_g + st_offs, mask=st_mask, other=0.0)
            z += gl.load(z_base + j * sz_g + cz, mask=z_mask, other=0.0)
    else:
        S = gl.load(s_base + g * ss_g + st_offs, mask=st_mask & (has_s != 0), other=0.0)
        z = gl.load(z_base + g * sz_g + cz, mask=z_mask & (has_s != 0), other=0.0)
    return S, z


@gluon.jit
def _start_state(s_ptr, z_ptr, bk, g, has_s, ss_bh, ss_g, sz_bh, sz_g, t, DS, DVS,
                 BK: gl.constexpr, BT: gl.constexpr, layout: gl.constexpr, z_layout: gl.constexpr):
    """The state segment g starts from (_segment_state) in `layout`, loaded in a blocked layout and
    converted once; call it before the kernel's shared buffers exist (the conversion's scratch may
    overlap them). Loaded in the accumulator's layout, its [BK, BT] offsets stayed live through the
    forward's loop for the final store, which spilled and cost 15% at 128 features (634.8 against
    544.0 us at B1 H16 N65536, H200)."""
    TS: gl.constexpr = BT // 4 if BT // 4 < 32 else 32
    lds: gl.constexpr = gl.BlockedLayout([1, 4], [32 // TS, TS], [gl.num_warps(), 1], [1, 0])
    S, z = _segment_state(s_ptr, z_ptr, bk, g, has_s, ss_bh, ss_g, sz_bh, sz_g, t, DS, DVS, BK, BT, lds, z_layout)
    return gl.convert_layout(S, layout), z


@gluon.jit
def _store_rows(ob, o, den, rows, cols, N, DV, so_n, normalize, scale, eps, on):
    """One chunk's outputs: o / den (normalized maps; scale multiplies qf, so num and den alike,
    applied per row here) or o, for `rows` where `on`."""
    out = o * gl.where(normalize != 0, scale / (den * scale + eps), scale)[:, None]
    mask = ((rows < N) & on)[:, None] & (cols < DV)[None, :]
    gl.store(ob + rows[:, None].to(gl.int64) * so_n + cols[None, :], out.to(gl.bfloat16), mask=mask)


@gluon.jit
def _fixed_state_walk(qb, ob, s_ptr, z_ptr, bk, g, has_s, ss_bh, ss_g, sz_bh, sz_g, t, N, D, DV, DS, DVS, L,
                      normalize, scale, eps, sq_n, so_n,
                      C: gl.constexpr, BK: gl.constexpr, BT: gl.constexpr, FEAT: gl.constexpr,
                      STAGES: gl.constexpr):
    """The bidirectional walk (CAUSAL = 0): out_i = qf_i S / (qf_i . z + eps) against the total state
    (s, z)[bk] + g * (ss_g, sz_g). S is fixed, so its bf16 copy enters shared memory once (la_fwd_kernel
    rounds it once too) and each chunk needs one wgmma, qf S; z stays fp32 in registers. Each
    chunk's product is issued before the previous chunk's outputs are stored, so the store and the
    product overlap. la_fwd_kernel waits for each dot and holds one program per multiprocessor at
    256 features: latency-bound (ncu, thirty-eighth session)."""
    NW: gl.constexpr = gl.num_warps()
    WN: gl.constexpr = NW // 4  # warpgroups, side by side along the output's columns
    TK: gl.constexpr = BK // 8 if BK // 8 < 32 else 32
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TK, TK], [NW, 1], [1, 0])
    TS: gl.constexpr = BT // 4 if BT // 4 < 32 else 32
    lds: gl.constexpr = gl.BlockedLayout([1, 4], [32 // TS, TS], [NW, 1], [1, 0])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, BT // WN, 16])
    row: gl.constexpr = gl.SliceLayout(1, mma)
    nv: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    nv_v: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128 if BT >= 64 else BT * 2, element_bitwidth=16, rank=2)
    raw: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])

    q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BK], raw)
    qf_s = gl.allocate_shared_memory(gl.bfloat16, [C, BK], nv)
    st_s = gl.allocate_shared_memory(gl.bfloat16, [BK, BT], nv_v)

    ci = gl.arange(0, C, layout=gl.SliceLayout(1, ld))
    cd = gl.arange(0, BK, layout=gl.SliceLayout(0, ld))
    r0 = g * L
    n_chunks = gl.cdiv(gl.minimum(L, N - r0), C)
    for i in gl.static_range(STAGES - 1):
        _issue_tile(q_s.index(i), qb, r0 + i * C + ci, cd, N, D, sq_n, i < n_chunks)
        cp.commit_group()

    # S in slices of 32 rows: the whole [BK, BT] fp32 tile would take 128 registers a thread at 256
    # features with 8 warps.
    SR: gl.constexpr = 32
    sj = t * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, lds))
    s_base = s_ptr + bk.to(gl.int64) * ss_bh + g * ss_g
    for i in gl.static_range(BK // SR):
        si = i * SR + gl.arange(0, SR, layout=gl.SliceLayout(1, lds))
        s_mask = ((si < DS) & (has_s != 0))[:, None] & (sj < DVS)[None, :]
        s_part = gl.load(s_base + si[:, None] * DVS + sj[None, :], mask=s_mask, other=0.0)
        st_s.slice(i * SR, SR, dim=0).store(s_part.to(gl.bfloat16))
    z = gl.load(z_ptr + bk.to(gl.int64) * sz_bh + g * sz_g + cd, mask=(cd < DS) & (has_s != 0), other=0.0)

    oi = gl.arange(0, C, layout=row)
    oj = t * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, mma))
    zero_o = gl.zeros([C, BT], gl.float32, mma)
    f_on = gl.where(cd < D, 1.0, 0.0)
    o_prev = zero_o
    den_prev = gl.zeros([C], gl.float32, row)
    for it in range(n_chunks):
        nxt = it + STAGES - 1
        _issue_tile(q_s.index(nxt % STAGES), qb, r0 + nxt * C + ci, cd, N, D, sq_n, nxt < n_chunks)
        cp.commit_group()
        cp.wait_group(STAGES - 1)  # this chunk's copy has landed
        qf = _phi(q_s.index(it % STAGES).load(ld).to(gl.float32), FEAT)
        if FEAT == 2:  # elu+1 maps the zeros loaded for padding to 1 (identity and relu keep 0)
            qf = qf * f_on[None, :]
        den = gl.convert_layout(gl.sum(qf * z[None, :], 1), row)
        qf_s.store(qf.to(gl.bfloat16))
        fence_async_shared()  # S's copy and qf, written by every thread, before the wgmma reads them
        o = warpgroup_mma(qf_s, st_s, zero_o, use_acc=False, is_async=True)
        _store_rows(ob, o_prev, den_prev, r0 + (it - 1) * C + oi, oj, N, DV, so_n, normalize, scale, eps, it > 0)
        o_prev = warpgroup_mma_wait(0, deps=(o, ))
        den_prev = den
    _store_rows(ob, o_prev, den_prev, r0 + (n_chunks - 1) * C + oi, oj, N, DV, so_n, normalize, scale, eps,
                n_chunks > 0)
    cp.wait_group(0)  # no copy may still target shared memory as the program exits


@gluon.jit
def la_fwd_wgmma_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, wc_ptr, ws_ptr,
    s_ptr, z_ptr, sf_ptr, zf_ptr, den_ptr, dl_ptr, acc_ptr, accd_ptr,
    H, HKV, N, D, DV, DS, DVS, G, L,
    phi_kind, normalize, n_parts, has_s, write_final, stats, part,
    scale, eps,
    sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, so_b, so_h, so_n,
    sw_b, ss_bh, ss_g, sz_bh, sz_g,
    C: gl.constexpr, CAUSAL: gl.constexpr, BK: gl.constexpr, BT: gl.constexpr, PREC: gl.constexpr,
    FEAT: gl.constexpr, STAGES: gl.constexpr, STATS: gl.constexpr,
):
    """la_fwd_kernel's arguments and grid (Dv tiles x H / Hkv x G x B*Hkv); wc, ws, phi_kind,
    n_parts, acc, accd and part are unused (one part, the map compiled in), and CAUSAL = 0 (_fixed_state_walk) reads
    neither k nor v. STATS = 1 is la_fwd_kernel's stats = 1 (the
    backward's stats pass: o_ptr is grad_out, read; den and dl written, as there), compiled in so
    that the plain forward's code stays as it was; the run-time `stats` is unused."""
    gl.static_assert(PREC == 1 and FEAT > 0, "the bf16 forward with one feature part")
    # The bidirectional walk reads its state unfolded (csrc fold_scan folds only up to 64 features).
    gl.static_assert(CAUSAL == 1 or (STATS == 0 and BK > 64), "the bidirectional walk: the plain forward above 64")
    gl.static_assert(C == 64 and BK >= 64 and BT >= 16, "64-row chunks, at least 64 features")
    _wait_for_primary()  # first: the state below may be the previous kernel's output
    NW: gl.constexpr = gl.num_warps()
    WN: gl.constexpr = NW // 4  # warpgroups, side by side along each product's columns
    # Each thread loads 8 contiguous bf16 (16 bytes) of a row.
    TK: gl.constexpr = BK // 8 if BK // 8 < 32 else 32
    TV: gl.constexpr = BT // 8 if BT // 8 < 32 else 32
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TK, TK], [NW, 1], [1, 0])
    ldv: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TV, TV], [NW, 1], [1, 0])
    mma_a: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, C // WN, 16])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, BT // WN, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    nv: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    nv_v: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128 if BT >= 64 else BT * 2, element_bitwidth=16, rank=2)
    raw: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])

    nt = gl.cdiv(DV, BT)
    n_rep = H // HKV
    pid = gl.program_id(0)
    t = pid % nt
    r = (pid // nt) % n_rep
    g = (pid // nt // n_rep) % G
    bk = pid // nt // n_rep // G
    b = (bk // HKV).to(gl.int64)
    hk = bk % HKV
    h = hk * n_rep + r
    qb = q_ptr + b * sq_b + h * sq_h
    kb = k_ptr + b * sk_b + hk * sk_h
    vb = v_ptr + b * sv_b + hk * sv_h
    ob = o_ptr + b * so_b + h * so_h

    if CAUSAL == 0:
        _fixed_state_walk(qb, ob, s_ptr, z_ptr, bk, g, has_s, ss_bh, ss_g, sz_bh, sz_g, t, N, D, DV, DS, DVS, L,
                          normalize, scale, eps, sq_n, so_n, C, BK, BT, FEAT, STAGES)
    else:
        S, z = _start_state(s_ptr, z_ptr, bk, g, has_s, ss_bh, ss_g, sz_bh, sz_g, t, DS, DVS, BK, BT, mma,
                            gl.SliceLayout(0, ld))

        q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BK], raw)
        k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BK], raw)
        v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BT], nv_v)
        qf_s = gl.allocate_shared_memory(gl.bfloat16, [C, BK], nv)
        kf_s = gl.allocate_shared_memory(gl.bfloat16, [C, BK], nv)
        st_s = gl.allocate_shared_memory(gl.bfloat16, [BK, BT], nv_v)
        if STATS:  # grad_out's tiles, through the ring like v's
            do_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, BT], raw)

        ci = gl.arange(0, C, layout=gl.SliceLayout(1, ld))
        civ = gl.arange(0, C, layout=gl.SliceLayout(1, ldv))
        cd = gl.arange(0, BK, layout=gl.SliceLayout(0, ld))
        cv = t * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, ldv))
        r0 = g * L
        n_chunks = gl.cdiv(gl.minimum(L, N - r0), C)
        for i in gl.static_range(STAGES - 1):
            _issue_chunk(q_s, k_s, v_s, qb, kb, vb, r0 + i * C + ci, r0 + i * C + civ, cd, cv, N, D, DV, sq_n, sk_n,
                         sv_n, i, i < n_chunks)
            if STATS:
                _issue_tile(do_s.index(i), ob, r0 + i * C + civ, cv, N, DV, so_n, i < n_chunks)
            cp.commit_group()

        st_s.store(S.to(gl.bfloat16))
        fence_async_shared()

        ai = gl.arange(0, C, layout=gl.SliceLayout(1, mma_a))
        aj = gl.arange(0, C, layout=gl.SliceLayout(0, mma_a))
        causal = ai[:, None] >= aj[None, :]
        oi = gl.arange(0, C, layout=gl.SliceLayout(1, mma))
        oj = t * BT + gl.arange(0, BT, layout=gl.SliceLayout(0, mma))
        zero_o = gl.zeros([C, BT], gl.float32, mma)
        zero_a = gl.zeros([C, C], gl.float32, mma_a)
        # Padded feature columns of qf zeroed are enough for every product: the padded rows of S and
        # z are never read nor stored. A segment's rows past N give kf 1 (elu+1), and z alone keeps
        # it (v's rows are 0, later rows do not exist): subtracted after the loop. Masking kf's rows
        # in the loop, under a branch, cost 2% (H200, B1 H16 N65536 D128).
        f_on = gl.where(cd < D, 1.0, 0.0)
        for it in range(n_chunks):
            nxt = it + STAGES - 1
            _issue_chunk(q_s, k_s, v_s, qb, kb, vb, r0 + nxt * C + ci, r0 + nxt * C + civ, cd, cv, N, D, DV, sq_n,
                         sk_n, sv_n, nxt % STAGES, nxt < n_chunks)
            if STATS:
                _issue_tile(do_s.index(nxt % STAGES), ob, r0 + nxt * C + civ, cv, N, DV, so_n, nxt < n_chunks)
            cp.commit_group()
            cp.wait_group(STAGES - 1)  # this chunk's copies have landed
            slot = it % STAGES
            qf = _phi(q_s.index(slot).load(ld).to(gl.float32), FEAT)
            kf = _phi(k_s.index(slot).load(ld).to(gl.float32), FEAT)
            if FEAT == 2:  # elu+1 maps the zeros loaded for padding to 1 (identity and relu keep 0)
                qf = qf * f_on[None, :]
            o, S, z, den = _chunk(qf, kf, qf_s, kf_s, st_s, v_s.index(slot), S, z, zero_o, zero_a, causal, a_op,
                                  gl.SliceLayout(1, mma))
            rows = r0 + it * C + oi
            if STATS:  # la_fwd_kernel's: den_i with eps (tile 0), and this tile's share of dout_i . out_i
                den = den * scale + eps
                dout = do_s.index(slot).load(mma).to(gl.float32)
                r_ok = rows < N
                bh = b * H + h
                gl.store(dl_ptr + (bh * nt + t) * N + rows, gl.sum(dout * o, 1) * (scale / den), mask=r_ok)
                gl.store(den_ptr + bh * N + rows, den, mask=r_ok & (t == 0))
            else:
                _store_rows(ob, o, den, rows, oj, N, DV, so_n, normalize, scale, eps, True)
        cp.wait_group(0)  # no copy may still target shared memory as the program exits

        # A branch: with these stores masked instead, the loop kept their addresses and masks live
        # (255 registers and a spill; 570.7 against 553.1 us without the store, B1 H16 N65536 D128).
        if (write_final != 0) & (r == 0) & (g == G - 1):
            if FEAT == 2:
                z -= gl.maximum(r0 + n_chunks * C - N, 0).to(gl.float32)
            si = gl.arange(0, BK, layout=gl.SliceLayout(1, mma))
            st_mask = (si < DS)[:, None] & (oj < DVS)[None, :]
            gl.store(sf_ptr + bk.to(gl.int64) * DS * DVS + si[:, None] * DVS + oj[None, :], S, mask=st_mask)
            gl.store(zf_ptr + bk.to(gl.int64) * DS + cd, z, mask=(cd < DS) & (t == 0))
    _launch_dependents()  # last: the next kernel may be scheduled as this grid drains

"""The first form of triton_src/linear_attn/fwd_wgmma.py: the causal forward walk in Gluon, reduced
to what decides its speed, for benchmarks/linear_attn_wgmma_sweep.py (which compiles it with
Triton 3.8 on the CPU machine and times it on the GPU machine).

q, k, v, o [BH, N, D] bf16 contiguous, Dv = D; elu+1 features, normalized, no GQA, no masks but
rows past N. Grid: G segments x BH, each walking its L rows from a zero state. The shipped kernel
adds the segment's start state, the final state, GQA, padding, scale and the run-time switches;
both run the same per-chunk products (fwd_wgmma._chunk).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from triton_src.linear_attn.fwd_wgmma import _chunk, _phi


@gluon.jit
def _issue(q_s, k_s, v_s, qb, kb, vb, rows, cd, sn, slot, ok):
    offs = rows[:, None] * sn + cd[None, :]
    m = (rows[:, None] >= 0) & ok
    cp.async_load(q_s.index(slot), qb + offs, mask=m)
    cp.async_load(k_s.index(slot), kb + offs, mask=m)
    cp.async_load(v_s.index(slot), vb + offs, mask=m)


@gluon.jit
def walk_kernel(q_ptr, k_ptr, v_ptr, o_ptr, N, L, G, s_bh, s_n, eps,
                C: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    DV: gl.constexpr = D
    WN: gl.constexpr = num_warps // 4
    pid = gl.program_id(0)
    g = pid % G
    bh = (pid // G).to(gl.int64)
    TC: gl.constexpr = D // 8 if D // 8 < 32 else 32
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TC, TC], [num_warps, 1], [1, 0])
    mma_a: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, C // WN, 16])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN], instr_shape=[16, DV // WN, 16])
    aop: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    nv: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    raw: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])

    q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, D], raw)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, D], raw)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, C, DV], nv)
    qf_s = gl.allocate_shared_memory(gl.bfloat16, [C, D], nv)
    kf_s = gl.allocate_shared_memory(gl.bfloat16, [C, D], nv)
    st_s = gl.allocate_shared_memory(gl.bfloat16, [D, DV], nv)

    qb = q_ptr + bh * s_bh
    kb = k_ptr + bh * s_bh
    vb = v_ptr + bh * s_bh
    ob = o_ptr + bh * s_bh
    ci = gl.arange(0, C, layout=gl.SliceLayout(1, ld))
    cd = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    r0 = g * L
    n_chunks = gl.cdiv(gl.minimum(L, N - r0), C)
    for i in gl.static_range(STAGES - 1):
        _issue(q_s, k_s, v_s, qb, kb, vb, r0 + i * C + ci, cd, s_n, i, i < n_chunks)
        cp.commit_group()

    S = gl.zeros([D, DV], gl.float32, mma)
    z = gl.zeros([D], gl.float32, gl.SliceLayout(0, ld))
    st_s.store(gl.zeros([D, DV], gl.bfloat16, ld))
    ai = gl.arange(0, C, layout=gl.SliceLayout(1, mma_a))
    aj = gl.arange(0, C, layout=gl.SliceLayout(0, mma_a))
    mi = gl.arange(0, C, layout=gl.SliceLayout(1, mma))
    mj = gl.arange(0, DV, layout=gl.SliceLayout(0, mma))
    zero_o = gl.zeros([C, DV], gl.float32, mma)
    zero_a = gl.zeros([C, C], gl.float32, mma_a)
    for it in range(n_chunks):
        nxt = it + STAGES - 1
        _issue(q_s, k_s, v_s, qb, kb, vb, r0 + nxt * C + ci, cd, s_n, nxt % STAGES, nxt < n_chunks)
        cp.commit_group()
        cp.wait_group(STAGES - 1)
        slot = it % STAGES
        qf = _phi(q_s.index(slot).load(ld).to(gl.float32), 2)
        kf = _phi(k_s.index(slot).load(ld).to(gl.float32), 2)
        o, S, z, den = _chunk(qf, kf, qf_s, kf_s, st_s, v_s.index(slot), S, z, zero_o, zero_a,
                              ai[:, None] >= aj[None, :], aop,
                              gl.SliceLayout(1, mma))
        den = den + eps
        out = o * (1.0 / den)[:, None]
        rows = r0 + it * C + mi
        gl.store(ob + rows[:, None].to(gl.int64) * s_n + mj[None, :], out.to(gl.bfloat16), mask=(rows < N)[:, None])

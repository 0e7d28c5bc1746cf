"""Low-rank decode in one launch, and the floors of a decode call in a CUDA graph (H200 experiment).

The experiment behind the decode notes in benchmarks/results/low_rank.md. It times, per call in a
CUDA graph of 32 layers (in = out = 4096, r256, bf16; each layer's weights read from DRAM):
  - nop:    neuralops.low_rank.fwd (two kernels chained by programmatic dependent launch);
  - lin:    two F.linear calls;
  - one*:   decode1_kernel, ONE launch: every program computes a partial of h = x @ V.T, the last
            split of each R block sums them (per-block counters), a grid barrier waits for h, then
            every program writes its columns of y. Its counters reset themselves (no memset, no
            ticket); the grid must be co-resident (here: at most one program per SM). one_shot sums
            the partials with one 3D load instead of a loop;
  - atomic*: decode2_kernel, ONE launch, h accumulated with fp32 atomics (zeroed by the last
            program out);
  - empty:  a kernel that does nothing (the graph's cost per kernel node);
  - read*:  a kernel that only reads the 4 MB of weights (the floor of a one-kernel decode).
Prototype code: Triton JIT, not part of the package (the package ships AOT kernels only).

    python benchmarks/low_rank_decode_floor.py          # on a GPU, after installing neuralops
    TRITON_INTERPRET=1 python benchmarks/low_rank_decode_floor.py   # the kernels' numerics on CPU
"""
import os
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

INTERP = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def decode1_kernel(x_ptr, v_ptr, u_ptr, bias_ptr, y_ptr, h_ptr, part_ptr, sync_ptr,
                   M, K, R, N, k_split, n_ksplit, has_bias,
                   sx_m, sv_r, su_n, sy_m, sh_m,
                   BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_RU: tl.constexpr, POLL_LOAD: tl.constexpr, KS_P: tl.constexpr):
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    # prefetch the first output tile's U chunk and bias (weights only: nothing this kernel writes)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < N
    rc = tl.arange(0, BLOCK_RU)
    u_cols = u_ptr + cols.to(tl.int64)[None, :] * su_n
    ut0 = tl.load(u_cols + rc[:, None], mask=c_ok[None, :] & (rc[:, None] < R), other=0.0)
    bias0 = tl.load(bias_ptr + cols, mask=c_ok & (has_bias != 0), other=0.0).to(tl.float32)

    n_rb = tl.cdiv(R, BLOCK_R)
    a_tiles = n_rb * n_ksplit
    kk0 = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + rows.to(tl.int64) * sx_m
    for t in range(pid, a_tiles, G):
        rb = t % n_rb
        ks = t // n_rb
        rr = rb * BLOCK_R + tl.arange(0, BLOCK_R)
        r_ok = rr < R
        v_rows = v_ptr + rr.to(tl.int64) * sv_r
        k_lo = ks * k_split
        k_hi = tl.minimum(k_lo + k_split, K)
        acc = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            kk = k0 + kk0
            k_ok = kk < k_hi
            a = tl.load(x_rows[:, None] + kk[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(v_rows[None, :] + kk[:, None], mask=r_ok[None, :] & k_ok[:, None], other=0.0)
            acc = tl.dot(a, b, acc)
        slab = R.to(tl.int64) * M
        part = part_ptr + (rows.to(tl.int64) * R)[:, None] + rr[None, :]
        tile_ok = row_ok[:, None] & r_ok[None, :]
        tl.store(part + ks * slab, acc, mask=tile_ok)
        tl.debug_barrier()
        arrived = tl.atomic_add(sync_ptr + 2 + rb, 1, sem="acq_rel")
        if arrived == n_ksplit - 1:
            # the last split of this R block: sum the partials in order, reset the block's counter
            tl.atomic_xchg(sync_ptr + 2 + rb, 0, sem="relaxed")
            if KS_P > 0:
                ss = tl.arange(0, KS_P)
                p3 = part[None, :, :] + (ss.to(tl.int64) * slab)[:, None, None]
                m3 = tile_ok[None, :, :] & (ss < n_ksplit)[:, None, None]
                total = tl.sum(tl.load(p3, mask=m3, other=0.0, cache_modifier=".cg"), axis=0)
            else:
                total = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
                for s in range(0, n_ksplit):
                    total += tl.load(part + s * slab, mask=tile_ok, other=0.0, cache_modifier=".cg")
            tl.store(h_ptr + rows.to(tl.int64)[:, None] * sh_m + rr[None, :], total.to(h_ptr.dtype.element_ty), mask=tile_ok)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr, 1, sem="release")
    # grid barrier: wait until every R block of h is written
    if POLL_LOAD:
        seen = tl.load(sync_ptr, volatile=True)
        while seen < n_rb:
            seen = tl.load(sync_ptr, volatile=True)
        seen = tl.atomic_add(sync_ptr, 0, sem="acquire")
    else:
        seen = tl.atomic_add(sync_ptr, 0, sem="acquire")
        while seen < n_rb:
            seen = tl.atomic_add(sync_ptr, 0, sem="acquire")
    tl.debug_barrier()
    left = tl.atomic_add(sync_ptr + 1, 1, sem="relaxed")
    if left == G - 1:
        tl.atomic_xchg(sync_ptr, 0, sem="relaxed")
        tl.atomic_xchg(sync_ptr + 1, 0, sem="relaxed")
    # output tiles
    n_tiles = tl.cdiv(N, BLOCK_N)
    h_rows = h_ptr + rows.to(tl.int64)[:, None] * sh_m
    for tile in range(pid, n_tiles, G):
        cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ok = cols < N
        u_cols = u_ptr + cols.to(tl.int64)[None, :] * su_n
        if tile == pid:
            ut = ut0
            bias = bias0
        else:
            ut = tl.load(u_cols + rc[:, None], mask=c_ok[None, :] & (rc[:, None] < R), other=0.0)
            bias = tl.load(bias_ptr + cols, mask=c_ok & (has_bias != 0), other=0.0).to(tl.float32)
        h = tl.load(h_rows + rc[None, :], mask=row_ok[:, None] & (rc[None, :] < R), other=0.0, cache_modifier=".cg")
        out = tl.dot(h, ut, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
        for r0 in range(BLOCK_RU, R, BLOCK_RU):
            rr = r0 + rc
            ut = tl.load(u_cols + rr[:, None], mask=c_ok[None, :] & (rr[:, None] < R), other=0.0)
            h = tl.load(h_rows + rr[None, :], mask=row_ok[:, None] & (rr[None, :] < R), other=0.0, cache_modifier=".cg")
            out = tl.dot(h, ut, out)
        out += bias[None, :]
        tl.store(y_ptr + rows.to(tl.int64)[:, None] * sy_m + cols[None, :], out.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & c_ok[None, :])


@triton.jit
def decode2_kernel(x_ptr, v_ptr, u_ptr, bias_ptr, y_ptr, acc_ptr, sync_ptr,
                   M, K, R, N, k_split, n_ksplit, has_bias,
                   sx_m, sv_r, su_n, sy_m,
                   BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_RU: tl.constexpr):
    """h accumulated with fp32 atomics into acc (zero on entry; the last program out zeroes it)."""
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    rc = tl.arange(0, BLOCK_RU)
    n_tiles = tl.cdiv(N, BLOCK_N)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < N
    u_cols = u_ptr + cols.to(tl.int64)[None, :] * su_n
    ut0 = tl.load(u_cols + rc[:, None], mask=c_ok[None, :] & (rc[:, None] < R), other=0.0)
    bias0 = tl.load(bias_ptr + cols, mask=c_ok & (has_bias != 0), other=0.0).to(tl.float32)
    n_rb = tl.cdiv(R, BLOCK_R)
    a_tiles = n_rb * n_ksplit
    kk0 = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + rows.to(tl.int64) * sx_m
    for t in range(pid, a_tiles, G):
        rb = t % n_rb
        ks = t // n_rb
        rr = rb * BLOCK_R + tl.arange(0, BLOCK_R)
        r_ok = rr < R
        v_rows = v_ptr + rr.to(tl.int64) * sv_r
        k_lo = ks * k_split
        k_hi = tl.minimum(k_lo + k_split, K)
        acc = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            kk = k0 + kk0
            k_ok = kk < k_hi
            a = tl.load(x_rows[:, None] + kk[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(v_rows[None, :] + kk[:, None], mask=r_ok[None, :] & k_ok[:, None], other=0.0)
            acc = tl.dot(a, b, acc)
        tl.atomic_add(acc_ptr + (rows * R)[:, None] + rr[None, :], acc, mask=row_ok[:, None] & r_ok[None, :], sem="relaxed")
        tl.debug_barrier()
        tl.atomic_add(sync_ptr, 1, sem="release")
    seen = tl.load(sync_ptr, volatile=True)
    while seen < a_tiles:
        seen = tl.load(sync_ptr, volatile=True)
    seen = tl.atomic_add(sync_ptr, 0, sem="acquire")
    tl.debug_barrier()
    h = tl.load(acc_ptr + (rows * R)[:, None] + rc[None, :], mask=row_ok[:, None] & (rc[None, :] < R), other=0.0,
                cache_modifier=".cg").to(u_ptr.dtype.element_ty)
    tl.debug_barrier()
    left = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel")
    if left == G - 1:
        tl.store(acc_ptr + (rows * R)[:, None] + rc[None, :], tl.zeros((BLOCK_M, BLOCK_RU), dtype=tl.float32),
                 mask=row_ok[:, None] & (rc[None, :] < R))
        tl.atomic_xchg(sync_ptr, 0, sem="relaxed")
        tl.atomic_xchg(sync_ptr + 1, 0, sem="relaxed")
    for tile in range(pid, n_tiles, G):
        cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ok = cols < N
        if tile == pid:
            ut = ut0
            bias = bias0
        else:
            u_cols = u_ptr + cols.to(tl.int64)[None, :] * su_n
            ut = tl.load(u_cols + rc[:, None], mask=c_ok[None, :] & (rc[:, None] < R), other=0.0)
            bias = tl.load(bias_ptr + cols, mask=c_ok & (has_bias != 0), other=0.0).to(tl.float32)
        out = tl.dot(h, ut, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)) + bias[None, :]
        tl.store(y_ptr + rows.to(tl.int64)[:, None] * sy_m + cols[None, :], out.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & c_ok[None, :])


_ACC = {}


def decode2(x, U, V, bias, G=None, BK=None, BR=32, BN=32, ks=None, warps=4, stages=3):
    M, K = x.shape
    R, N = V.shape[0], U.shape[0]
    BM = 16 if M <= 16 else 64
    BK = BK or (128 if BM == 16 else 64)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    n_rb = triton.cdiv(R, BR)
    if ks is None:
        ks = max(1, min(triton.cdiv(K, BK), sms // n_rb))
    k_split = triton.cdiv(triton.cdiv(K, ks), BK) * BK
    ks = triton.cdiv(K, k_split)
    G = G or min(sms, max(n_rb * ks, triton.cdiv(N, BN)))
    key = (x.device, R)
    if key not in _ACC:
        _ACC[key] = (torch.zeros(64 * R, dtype=torch.float32, device=x.device), torch.zeros(2, dtype=torch.int32, device=x.device))
    acc, sync = _ACC[key]
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    decode2_kernel[(G,)](x, V, U, bias if bias is not None else y, y, acc, sync,
                         M, K, R, N, k_split, ks, int(bias is not None),
                         x.stride(0), V.stride(0), U.stride(0), y.stride(0),
                         BLOCK_M=BM, BLOCK_K=BK, BLOCK_R=BR, BLOCK_N=BN, BLOCK_RU=triton.next_power_of_2(R),
                         num_warps=warps, num_stages=stages)
    return y, (x.float() @ V.float().T).to(x.dtype), sync


_SYNC = {}


def decode1(x, U, V, bias, G=None, BK=None, BR=32, BN=32, BRU=256, poll_load=True, ks=None, warps=4, stages=3, oneshot=False):
    M, K = x.shape
    R, N = V.shape[0], U.shape[0]
    BM = 16 if M <= 16 else 64
    BK = BK or (128 if BM == 16 else 64)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    n_rb = triton.cdiv(R, BR)
    if ks is None:
        ks = max(1, min(triton.cdiv(K, BK), sms // n_rb))
    k_split = triton.cdiv(triton.cdiv(K, ks), BK) * BK
    ks = triton.cdiv(K, k_split)
    G = G or min(sms, max(n_rb * ks, triton.cdiv(N, BN)))
    key = (x.device, n_rb)
    if key not in _SYNC:
        _SYNC[key] = torch.zeros(2 + n_rb, dtype=torch.int32, device=x.device)
    sync = _SYNC[key]
    part = torch.empty(ks, M, R, dtype=torch.float32, device=x.device)
    h = torch.empty(M, R, dtype=x.dtype, device=x.device)
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    decode1_kernel[(G,)](x, V, U, bias if bias is not None else y, y, h, part, sync,
                         M, K, R, N, k_split, ks, int(bias is not None),
                         x.stride(0), V.stride(0), U.stride(0), y.stride(0), h.stride(0),
                         BLOCK_M=BM, BLOCK_K=BK, BLOCK_R=BR, BLOCK_N=BN, BLOCK_RU=min(BRU, triton.next_power_of_2(R)),
                         POLL_LOAD=poll_load, KS_P=triton.next_power_of_2(ks) if oneshot else 0, num_warps=warps, num_stages=stages)
    return y, h, sync


def check(dev, dtype, cases, fn=None):
    worst = 0.0
    for (M, K, R, N, G) in cases:
        x = torch.randn(M, K, device=dev, dtype=dtype)
        V = torch.randn(R, K, device=dev, dtype=dtype) / K**0.5
        U = torch.randn(N, R, device=dev, dtype=dtype) / R**0.5
        b = torch.randn(N, device=dev, dtype=dtype)
        y, h, sync = (fn or decode1)(x, U, V, b, G=G)
        href = (x.double() @ V.double().T)
        yref = h.double() @ U.double().T + b.double()
        e1 = ((h.double() - href).norm() / href.norm()).item()
        e2 = ((y.double() - yref).norm() / yref.norm()).item()
        assert int(sync.abs().sum()) == 0, sync
        for a_, s_ in _ACC.values():
            assert float(a_.abs().sum()) == 0
        worst = max(worst, e1, e2)
        print(f"M{M} K{K} R{R} N{N} G{G}: h err {e1:.1e} y err {e2:.1e}", flush=True)
    return worst


if __name__ == "__main__":
    if INTERP:
        check("cpu", torch.float32, [(3, 64, 48, 80, 1), (16, 256, 64, 32, 1)])
        check("cpu", torch.float32, [(3, 64, 48, 80, 1), (16, 256, 64, 32, 1)], lambda *a, **k: decode1(*a, **k, oneshot=True))
        sys.exit(0)
    dt = torch.bfloat16
    w = check("cuda", dt, [(1, 4096, 256, 4096, None), (16, 4096, 256, 4096, None), (64, 4096, 256, 4096, None),
                          (7, 4096, 512, 11008, None), (33, 1024, 96, 400, None), (16, 4096, 256, 4096, 8),
                          (64, 11008, 256, 4096, None)])
    cs = [(1, 4096, 256, 4096, None), (16, 4096, 256, 4096, None), (64, 4096, 256, 4096, None),
          (33, 1024, 96, 400, None), (16, 4096, 256, 4096, 8), (64, 11008, 256, 4096, None), (64, 4096, 256, 11008, None)]
    w = max(w, check("cuda", dt, cs, lambda *a, **k: decode1(*a, **k, oneshot=True)))
    w = max(w, check("cuda", dt, cs, decode2))
    print("worst", w)
    from neuralops.core.triton_kernels import low_rank as lr
    from neuralops.bench.timing import Timer, add_graphed_layers
    t = Timer(warmup=5, reps=40)

    @triton.jit
    def empty_kernel(p):
        pass

    @triton.jit
    def read_kernel(v_ptr, u_ptr, out_ptr, nv, nu, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        G = tl.num_programs(0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(pid * BLOCK, nv, G * BLOCK):
            acc += tl.load(v_ptr + i + tl.arange(0, BLOCK)).to(tl.float32)
        for i in range(pid * BLOCK, nu, G * BLOCK):
            acc += tl.load(u_ptr + i + tl.arange(0, BLOCK)).to(tl.float32)
        tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)

    @triton.jit
    def read1_kernel(v_ptr, u_ptr, out_ptr, nv, nu, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        a = tl.load(v_ptr + pid * BLOCK + tl.arange(0, BLOCK)).to(tl.float32)
        b = tl.load(u_ptr + pid * BLOCK + tl.arange(0, BLOCK)).to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(a + b, axis=0))

    scratch = torch.empty(132 * 8192, device="cuda")
    for m in (1, 16, 64):
        x = torch.randn(m, 4096, device="cuda", dtype=dt)
        V = torch.randn(256, 4096, device="cuda", dtype=dt) * 0.02
        U = torch.randn(4096, 256, device="cuda", dtype=dt) * 0.06
        b = torch.randn(4096, device="cuda", dtype=dt)
        impls = {}
        add_graphed_layers(impls, "nop", lambda u, v, bb: lr.fwd(x, u, v, bb), (U, V, b))
        add_graphed_layers(impls, "lin", lambda u, v, bb: F.linear(F.linear(x, v), u, bb), (U, V, b))
        add_graphed_layers(impls, "one", lambda u, v, bb: decode1(x, u, v, bb)[0], (U, V, b))
        add_graphed_layers(impls, "one_shot", lambda u, v, bb: decode1(x, u, v, bb, oneshot=True)[0], (U, V, b))
        add_graphed_layers(impls, "one_shot_w8", lambda u, v, bb: decode1(x, u, v, bb, oneshot=True, warps=8)[0], (U, V, b))
        add_graphed_layers(impls, "one_shot_ks8", lambda u, v, bb: decode1(x, u, v, bb, oneshot=True, ks=8)[0], (U, V, b))
        add_graphed_layers(impls, "atomic", lambda u, v, bb: decode2(x, u, v, bb)[0], (U, V, b))
        add_graphed_layers(impls, "atomic_w8", lambda u, v, bb: decode2(x, u, v, bb, warps=8)[0], (U, V, b))
        add_graphed_layers(impls, "atomic_ks8", lambda u, v, bb: decode2(x, u, v, bb, ks=8)[0], (U, V, b))
        add_graphed_layers(impls, "atomic_br16", lambda u, v, bb: decode2(x, u, v, bb, BR=16, ks=8)[0], (U, V, b))
        if m == 1:
            add_graphed_layers(impls, "empty", lambda u, v, bb: empty_kernel[(132,)](u), (U, V, b))
            add_graphed_layers(impls, "read1shot", lambda u, v, bb: read1_kernel[(128,)](v, u, scratch, v.numel() // 128, u.numel() // 128, BLOCK=v.numel() // 128, num_warps=8), (U, V, b))
            for blk in (1024, 4096):
                add_graphed_layers(impls, f"read{blk}", lambda u, v, bb, blk=blk: read_kernel[(132,)](v, u, scratch, v.numel(), u.numel(), BLOCK=blk), (U, V, b))
        res = {k.split(",")[0]: round(t.median_ms(f) * 1e3, 2) for k, f in impls.items()}
        print(f"M{m} us/call {res}", flush=True)

"""Low-rank decode in one launch, and the floors of a decode call in a CUDA graph (H200 experiment).

The experiment behind the decode notes in benchmarks/results/low_rank.md. It times, per call in a
CUDA graph of 32 layers (in = out = 4096, r256, bf16; each layer's weights read from DRAM):
  - nop:    neuralops.low_rank.fwd (two kernels chained by programmatic dependent launch);
  - lin:    two F.linear calls;
  - one*:   barrier_decode_kernel, ONE launch: every program computes a partial of h = x @ V.T,
            the last split of each R block sums them (per-block counters), a grid barrier waits for
            h, then every program writes its columns of y. Its counters reset themselves (no memset,
            no ticket); the grid must be co-resident (here: at most one program per SM). one_shot
            sums the partials with one 3D load instead of a loop;
  - atomic*: atomic_decode_kernel, ONE launch, h accumulated with fp32 atomics (zeroed by the last
            program out);
  - empty:  a kernel that does nothing (the graph's cost per kernel node);
  - read*:  a kernel that only reads the 4 MB of weights (the floor of a one-kernel decode).
Prototype code: Triton JIT, not part of the package (the package ships AOT kernels only).

    python benchmarks/low_rank_decode_floor.py          # on a GPU, after installing neuralops
    TRITON_INTERPRET=1 python benchmarks/low_rank_decode_floor.py   # the kernels' numerics on CPU
"""
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from triton_src.low_rank.kernels import nt_tile  # noqa: E402  (the shipped kernels' K loop)

INTERP = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _u_tile(u_ptr, bias_ptr, tile, R, N, has_bias, su_n, BLOCK_N: tl.constexpr, BLOCK_RU: tl.constexpr):
    """Output tile `tile`'s first BLOCK_RU rows of U.T ([BLOCK_RU, BLOCK_N]) and its fp32 bias."""
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < N
    rc = tl.arange(0, BLOCK_RU)
    ut = tl.load(u_ptr + cols.to(tl.int64)[None, :] * su_n + rc[:, None], mask=c_ok[None, :] & (rc[:, None] < R),
                 other=0.0)
    return ut, tl.load(bias_ptr + cols, mask=c_ok & (has_bias != 0), other=0.0).to(tl.float32)


@triton.jit
def _h_partial(t, x_rows, v_ptr, row_ok, K, R, k_split, n_rb, sv_r,
               BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """Partial tile t (R block t % n_rb, K range t // n_rb) of h: (the fp32 tile, rb, ks, rr, r_ok)."""
    rb = t % n_rb
    ks = t // n_rb
    rr = rb * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rr < R
    k_lo = ks * k_split
    acc = nt_tile(x_rows, v_ptr + rr.to(tl.int64) * sv_r, row_ok, r_ok, k_lo, tl.minimum(k_lo + k_split, K),
                  BLOCK_M, BLOCK_R, BLOCK_K)
    return acc, rb, ks, rr, r_ok


@triton.jit
def _wait_for(sync_ptr, count):
    """Spins until the counter at sync_ptr reaches count, then acquires what the arrivals released."""
    seen = tl.load(sync_ptr, volatile=True)
    while seen < count:
        seen = tl.load(sync_ptr, volatile=True)
    tl.atomic_add(sync_ptr, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def barrier_decode_kernel(x_ptr, v_ptr, u_ptr, bias_ptr, y_ptr, h_ptr, part_ptr, sync_ptr,
                          M, K, R, N, k_split, n_ksplit, has_bias,
                          sx_m, sv_r, su_n, sy_m, sh_m,
                          BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_RU: tl.constexpr, KS_P: tl.constexpr):
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    # The first output tile's U and bias first: weights only, nothing this kernel writes.
    ut0, bias0 = _u_tile(u_ptr, bias_ptr, pid, R, N, has_bias, su_n, BLOCK_N, BLOCK_RU)
    n_rb = tl.cdiv(R, BLOCK_R)
    x_rows = x_ptr + rows.to(tl.int64) * sx_m
    for t in range(pid, n_rb * n_ksplit, G):
        acc, rb, ks, rr, r_ok = _h_partial(t, x_rows, v_ptr, row_ok, K, R, k_split, n_rb, sv_r,
                                           BLOCK_M, BLOCK_R, BLOCK_K)
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
            tl.store(h_ptr + rows.to(tl.int64)[:, None] * sh_m + rr[None, :], total.to(h_ptr.dtype.element_ty),
                     mask=tile_ok)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr, 1, sem="release")
    # grid barrier: wait until every R block of h is written; the last program through resets
    _wait_for(sync_ptr, n_rb)
    left = tl.atomic_add(sync_ptr + 1, 1, sem="relaxed")
    if left == G - 1:
        tl.atomic_xchg(sync_ptr, 0, sem="relaxed")
        tl.atomic_xchg(sync_ptr + 1, 0, sem="relaxed")
    h_rows = h_ptr + rows.to(tl.int64)[:, None] * sh_m
    rc = tl.arange(0, BLOCK_RU)
    for tile in range(pid, tl.cdiv(N, BLOCK_N), G):
        if tile == pid:
            ut, bias = ut0, bias0
        else:
            ut, bias = _u_tile(u_ptr, bias_ptr, tile, R, N, has_bias, su_n, BLOCK_N, BLOCK_RU)
        cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ok = cols < N
        h = tl.load(h_rows + rc[None, :], mask=row_ok[:, None] & (rc[None, :] < R), other=0.0, cache_modifier=".cg")
        out = tl.dot(h, ut, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
        u_cols = u_ptr + cols.to(tl.int64)[None, :] * su_n
        for r0 in range(BLOCK_RU, R, BLOCK_RU):
            rr = r0 + rc
            ut = tl.load(u_cols + rr[:, None], mask=c_ok[None, :] & (rr[:, None] < R), other=0.0)
            h = tl.load(h_rows + rr[None, :], mask=row_ok[:, None] & (rr[None, :] < R), other=0.0,
                        cache_modifier=".cg")
            out = tl.dot(h, ut, out)
        out += bias[None, :]
        tl.store(y_ptr + rows.to(tl.int64)[:, None] * sy_m + cols[None, :], out.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & c_ok[None, :])


@triton.jit
def atomic_decode_kernel(x_ptr, v_ptr, u_ptr, bias_ptr, y_ptr, acc_ptr, sync_ptr,
                         M, K, R, N, k_split, n_ksplit, has_bias,
                         sx_m, sv_r, su_n, sy_m,
                         BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_RU: tl.constexpr):
    """h accumulated with fp32 atomics into acc (zero on entry; the last program out zeroes it).
    R <= BLOCK_RU: h is read whole."""
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    ut0, bias0 = _u_tile(u_ptr, bias_ptr, pid, R, N, has_bias, su_n, BLOCK_N, BLOCK_RU)
    n_rb = tl.cdiv(R, BLOCK_R)
    a_tiles = n_rb * n_ksplit
    x_rows = x_ptr + rows.to(tl.int64) * sx_m
    for t in range(pid, a_tiles, G):
        acc, rb, ks, rr, r_ok = _h_partial(t, x_rows, v_ptr, row_ok, K, R, k_split, n_rb, sv_r,
                                           BLOCK_M, BLOCK_R, BLOCK_K)
        tl.atomic_add(acc_ptr + (rows * R)[:, None] + rr[None, :], acc, mask=row_ok[:, None] & r_ok[None, :],
                      sem="relaxed")
        tl.debug_barrier()
        tl.atomic_add(sync_ptr, 1, sem="release")
    _wait_for(sync_ptr, a_tiles)
    rc = tl.arange(0, BLOCK_RU)
    h_tile = acc_ptr + (rows * R)[:, None] + rc[None, :]
    h_ok = row_ok[:, None] & (rc[None, :] < R)
    h = tl.load(h_tile, mask=h_ok, other=0.0, cache_modifier=".cg").to(u_ptr.dtype.element_ty)
    tl.debug_barrier()
    left = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel")
    if left == G - 1:
        tl.store(h_tile, tl.zeros((BLOCK_M, BLOCK_RU), dtype=tl.float32), mask=h_ok)
        tl.atomic_xchg(sync_ptr, 0, sem="relaxed")
        tl.atomic_xchg(sync_ptr + 1, 0, sem="relaxed")
    for tile in range(pid, tl.cdiv(N, BLOCK_N), G):
        if tile == pid:
            ut, bias = ut0, bias0
        else:
            ut, bias = _u_tile(u_ptr, bias_ptr, tile, R, N, has_bias, su_n, BLOCK_N, BLOCK_RU)
        cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        out = tl.dot(h, ut, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)) + bias[None, :]
        tl.store(y_ptr + rows.to(tl.int64)[:, None] * sy_m + cols[None, :], out.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & (cols < N)[None, :])


def _plan(x, U, V, G, BK, BR, BN, ks):
    """(BLOCK_M, BLOCK_K, K splits, K per split, programs) for these inputs: one program per SM."""
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
    return BM, BK, ks, k_split, G or min(sms, max(n_rb * ks, triton.cdiv(N, BN)))


_ACC = {}   # (device, R) -> (fp32 h accumulator for up to 64 rows, counters): zero between calls
_SYNC = {}  # (device, R blocks) -> counters: zero between calls


def atomic_decode(x, U, V, bias, G=None, BK=None, BR=32, BN=32, ks=None, warps=4, stages=3):
    """(y, h from PyTorch (the kernel keeps its own), the counters)."""
    M, K = x.shape
    R, N = V.shape[0], U.shape[0]
    BM, BK, ks, k_split, G = _plan(x, U, V, G, BK, BR, BN, ks)
    key = (x.device, R)
    if key not in _ACC:
        _ACC[key] = (torch.zeros(64 * R, dtype=torch.float32, device=x.device),
                     torch.zeros(2, dtype=torch.int32, device=x.device))
    acc, sync = _ACC[key]
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    atomic_decode_kernel[(G,)](x, V, U, bias if bias is not None else y, y, acc, sync,
                               M, K, R, N, k_split, ks, int(bias is not None),
                               x.stride(0), V.stride(0), U.stride(0), y.stride(0),
                               BLOCK_M=BM, BLOCK_K=BK, BLOCK_R=BR, BLOCK_N=BN,
                               BLOCK_RU=triton.next_power_of_2(R), num_warps=warps, num_stages=stages)
    return y, (x.float() @ V.float().T).to(x.dtype), sync


def barrier_decode(x, U, V, bias, G=None, BK=None, BR=32, BN=32, BRU=256, ks=None, warps=4, stages=3,
                   oneshot=False):
    """(y, h, the counters)."""
    M, K = x.shape
    R, N = V.shape[0], U.shape[0]
    BM, BK, ks, k_split, G = _plan(x, U, V, G, BK, BR, BN, ks)
    n_rb = triton.cdiv(R, BR)
    key = (x.device, n_rb)
    if key not in _SYNC:
        _SYNC[key] = torch.zeros(2 + n_rb, dtype=torch.int32, device=x.device)
    sync = _SYNC[key]
    part = torch.empty(ks, M, R, dtype=torch.float32, device=x.device)
    h = torch.empty(M, R, dtype=x.dtype, device=x.device)
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    barrier_decode_kernel[(G,)](x, V, U, bias if bias is not None else y, y, h, part, sync,
                                M, K, R, N, k_split, ks, int(bias is not None),
                                x.stride(0), V.stride(0), U.stride(0), y.stride(0), h.stride(0),
                                BLOCK_M=BM, BLOCK_K=BK, BLOCK_R=BR, BLOCK_N=BN,
                                BLOCK_RU=min(BRU, triton.next_power_of_2(R)),
                                KS_P=triton.next_power_of_2(ks) if oneshot else 0, num_warps=warps, num_stages=stages)
    return y, h, sync


def check(dev, dtype, cases, fn):
    """Worst norm-wise relative error of h and y over `cases` (M, K, R, N, programs or None); the
    counters and the atomic accumulator must be back at zero after every call."""
    worst = 0.0
    for (M, K, R, N, G) in cases:
        x = torch.randn(M, K, device=dev, dtype=dtype)
        V = torch.randn(R, K, device=dev, dtype=dtype) / K**0.5
        U = torch.randn(N, R, device=dev, dtype=dtype) / R**0.5
        b = torch.randn(N, device=dev, dtype=dtype)
        y, h, sync = fn(x, U, V, b, G=G)
        href = (x.double() @ V.double().T)
        yref = h.double() @ U.double().T + b.double()
        e1 = ((h.double() - href).norm() / href.norm()).item()
        e2 = ((y.double() - yref).norm() / yref.norm()).item()
        assert int(sync.abs().sum()) == 0, sync
        for acc, _ in _ACC.values():
            assert float(acc.abs().sum()) == 0
        worst = max(worst, e1, e2)
        print(f"M{M} K{K} R{R} N{N} G{G}: h err {e1:.1e} y err {e2:.1e}", flush=True)
    return worst


def _oneshot(*args, **kwargs):
    return barrier_decode(*args, **kwargs, oneshot=True)


if __name__ == "__main__":
    variants = (barrier_decode, _oneshot, atomic_decode)
    if INTERP:
        for fn in variants:
            check("cpu", torch.float32, [(3, 64, 48, 80, 1), (16, 256, 64, 32, 1)], fn)
        sys.exit(0)
    dt = torch.bfloat16
    cases = [(1, 4096, 256, 4096, None), (16, 4096, 256, 4096, None), (64, 4096, 256, 4096, None),
             (33, 1024, 96, 400, None), (16, 4096, 256, 4096, 8), (64, 11008, 256, 4096, None),
             (64, 4096, 256, 11008, None)]
    print("worst", max(check("cuda", dt, cases, fn) for fn in variants))
    from neuralops.bench.timing import Timer, add_graphed_layers
    from neuralops.core.triton_kernels import low_rank as lr
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
        add_graphed_layers(impls, "one", lambda u, v, bb: barrier_decode(x, u, v, bb)[0], (U, V, b))
        add_graphed_layers(impls, "one_shot", lambda u, v, bb: barrier_decode(x, u, v, bb, oneshot=True)[0], (U, V, b))
        add_graphed_layers(impls, "one_shot_w8", lambda u, v, bb: barrier_decode(x, u, v, bb, oneshot=True, warps=8)[0], (U, V, b))
        add_graphed_layers(impls, "one_shot_ks8", lambda u, v, bb: barrier_decode(x, u, v, bb, oneshot=True, ks=8)[0], (U, V, b))
        add_graphed_layers(impls, "atomic", lambda u, v, bb: atomic_decode(x, u, v, bb)[0], (U, V, b))
        add_graphed_layers(impls, "atomic_w8", lambda u, v, bb: atomic_decode(x, u, v, bb, warps=8)[0], (U, V, b))
        add_graphed_layers(impls, "atomic_ks8", lambda u, v, bb: atomic_decode(x, u, v, bb, ks=8)[0], (U, V, b))
        add_graphed_layers(impls, "atomic_br16", lambda u, v, bb: atomic_decode(x, u, v, bb, BR=16, ks=8)[0], (U, V, b))
        if m == 1:
            add_graphed_layers(impls, "empty", lambda u, v, bb: empty_kernel[(132,)](u), (U, V, b))
            add_graphed_layers(impls, "read1shot", lambda u, v, bb: read1_kernel[(128,)](v, u, scratch, v.numel() // 128, u.numel() // 128, BLOCK=v.numel() // 128, num_warps=8), (U, V, b))
            for blk in (1024, 4096):
                add_graphed_layers(impls, f"read{blk}", lambda u, v, bb, blk=blk: read_kernel[(132,)](v, u, scratch, v.numel(), u.numel(), BLOCK=blk), (U, V, b))
        res = {k.split(",")[0]: round(t.median_ms(f) * 1e3, 2) for k, f in impls.items()}
        print(f"M{m} us/call {res}", flush=True)

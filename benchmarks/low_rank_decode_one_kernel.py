"""Experiment: the low-rank decode chain as ONE kernel, against the shipped chain and cuBLAS.

The shipped decode path (triton_src/low_rank/kernels.py) is a chain of kernels linked by
programmatic dependent launch: partials of h = x @ V.T over (R block, K range), at BLOCK_M 64 a
reduce kernel, then y = h @ U.T. Issue 4 asks for one launch. This script JIT-compiles two
one-kernel forms (Triton on the GPU machine; nothing here is part of the package) and times them
per call in a CUDA graph of layers (timing.add_graphed_layers), beside ``low_rank.fwd`` on its two
backends. Each program of the grid (n_rblocks, ksplit) computes one partial, then all of them
wait on a grid-wide counter and each writes one BLOCK_N tile of y:

  last-arriver  each program stores its fp32 partial and counts itself in its R block's counter;
                the last to arrive sums that block's partials in ks order (deterministic), stores
                its slice of h and adds to the grid counter;
  atomic        each program adds its partial into an fp32 accumulator (red.add: the sum's order,
                and so its last bits, depends on the order programs finish in) and adds to the grid
                counter. Two accumulators alternate by call; each call zeroes the other one for the
                next.

Both need every program resident at once (a grid of at most one program per SM, which the GPU runs
whole when nothing else holds SMs) and counters in zeroed memory that outlive the call. The
counters only grow, by 2**20 per call whatever the grid, so no call resets them: a program reads
the grid counter before its own partial (so before the call's last addition) and waits for the
next multiple of 2**20. Limits of this experiment: N <= programs * BLOCK_N (one tile of y per
program), h is not stored, bf16 only, one stream.

    python benchmarks/low_rank_decode_one_kernel.py [M:IN:RANK:OUT ...]   # default: M 16, 32, 64 at 4096/256/4096
    python benchmarks/low_rank_decode_one_kernel.py --timeline M:IN:RANK:OUT

--timeline prints, for the last layer of one replay, when the programs pass each step
(%globaltimer, which ticks in 0.256 us steps here): min / median / max over programs, us from the
first program's start.
"""

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

# The repository root, for triton_src; appended, so that the installed neuralops (with its compiled
# extension) is found before the source tree.
sys.path.append(str(Path(__file__).resolve().parents[1]))

from neuralops.bench.timing import Timer, add_graphed_layers, graphed, layer_copies
from neuralops.core.triton_kernels import low_rank
from triton_src.common.grid_dependency import launch_dependents, wait_for_primary
from triton_src.common.l2_prefetch import prefetch_rows_l2
from triton_src.low_rank.kernels import _dot, nt_tile

EPOCH = tl.constexpr(1 << 20)  # what one call adds to every counter
FORMS = {"last-arriver": False, "atomic": True}  # label -> ATOMIC
COLUMNS = ("triton", "cublas", *FORMS)  # the labels table() times, in its columns' order
STEPS = ("start", "waited", "partial stored", "counted", "grid flag seen", "end")
_STEP_COUNT = tl.constexpr(len(STEPS))  # one stamp per step and program


@triton.jit
def _ld_acquire(ptr):
    z = tl.zeros([1], tl.int32)
    v = tl.inline_asm_elementwise("ld.acquire.gpu.global.u64 $0, [$1];", "=l,l", [ptr + z], dtype=tl.int64,
                                  is_pure=False, pack=1)
    return tl.max(v, 0)


@triton.jit
def _stamp(ts_ptr, pid, step, TS: tl.constexpr):
    if TS:
        z = tl.zeros([1], tl.int32)
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [z], dtype=tl.int64, is_pure=False,
                                        pack=1)
        tl.store(ts_ptr + pid * _STEP_COUNT + step + z, now)


@triton.jit
def one_kernel(x_ptr, v_ptr, u_ptr, bias_ptr, y_ptr, work_ptr, h_ptr, sem_ptr, ts_ptr,
               M, K, R, N, k_split, sx, sv_r, su_n, sy_m,
               ATOMIC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_RO: tl.constexpr, TS: tl.constexpr):
    """work: last-arriver, fp32 partials [ksplit, M, R]; atomic, two fp32 accumulators [2, M, R].
    h: [M, R] in the input dtype (last-arriver). sem: int64, the grid counter then one per R block."""
    rb = tl.program_id(0)
    ks = tl.program_id(1)
    n_rb = tl.num_programs(0)
    n_ks = tl.num_programs(1)
    n_prog = n_rb * n_ks
    pid = rb + ks * n_rb
    r_lo = rb * BLOCK_R
    k_lo = ks * k_split
    k_hi = tl.minimum(k_lo + k_split, K)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < N
    _stamp(ts_ptr, pid, 0, TS)
    prefetch_rows_l2(v_ptr + k_lo, r_lo, tl.minimum(r_lo + BLOCK_R, R), k_hi - k_lo, sv_r, 32, 4)
    prefetch_rows_l2(u_ptr, pid * BLOCK_N, tl.minimum(pid * BLOCK_N + BLOCK_N, N), R, su_n, 32, 4)
    wait_for_primary()
    _stamp(ts_ptr, pid, 1, TS)
    launch_dependents()  # every program is resident by the time a dependent may start
    grid_ptr = sem_ptr
    epoch = _ld_acquire(grid_ptr) // EPOCH
    slice_size = M.to(tl.int64) * R
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    rr = r_lo + tl.arange(0, BLOCK_R)
    r_ok = rr < R
    tile = (rows.to(tl.int64) * R)[:, None] + rr[None, :]
    tile_ok = row_ok[:, None] & r_ok[None, :]
    if ATOMIC:
        h_src = work_ptr + (epoch % 2) * slice_size
        # This program's share of the other accumulator, zeroed for the next call.
        nxt = work_ptr + ((epoch + 1) % 2) * slice_size
        share = tl.cdiv(slice_size, n_prog)
        z_hi = tl.minimum(pid * share + share, slice_size)
        zo = tl.arange(0, 512)
        for z0 in range(pid * share, z_hi, 512):
            tl.store(nxt + z0 + zo, tl.zeros([512], tl.float32), mask=z0 + zo < z_hi)
    else:
        h_src = h_ptr
    acc = nt_tile(x_ptr + rows.to(tl.int64) * sx, v_ptr + rr.to(tl.int64) * sv_r, row_ok, r_ok, k_lo, k_hi,
                  BLOCK_M, BLOCK_R, BLOCK_K)
    if ATOMIC:
        tl.atomic_add(h_src + tile, acc, mask=tile_ok, sem="relaxed", scope="gpu")
        tl.debug_barrier()
        _stamp(ts_ptr, pid, 2, TS)
        part = EPOCH // n_prog
        tl.atomic_add(grid_ptr, tl.where(pid == 0, EPOCH - part * (n_prog - 1), part).to(tl.int64),
                      sem="release", scope="gpu")
        _stamp(ts_ptr, pid, 3, TS)
    else:
        tl.store(work_ptr + ks * slice_size + tile, acc, mask=tile_ok)
        tl.debug_barrier()
        _stamp(ts_ptr, pid, 2, TS)
        add = tl.where(ks == 0, EPOCH - (n_ks - 1), 1).to(tl.int64)
        arrived = tl.atomic_add(sem_ptr + 1 + rb, add, sem="acq_rel", scope="gpu") + add
        _stamp(ts_ptr, pid, 3, TS)
        if arrived % EPOCH == 0:
            total = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
            for s0 in range(0, n_ks, 8):
                for j in tl.static_range(8):
                    total += tl.load(work_ptr + (s0 + j) * slice_size + tile, mask=tile_ok & (s0 + j < n_ks),
                                     other=0.0, cache_modifier=".cg")
            tl.store(h_ptr + tile, total.to(h_ptr.dtype.element_ty), mask=tile_ok)
            tl.debug_barrier()
            part = EPOCH // n_rb
            tl.atomic_add(grid_ptr, tl.where(rb == 0, EPOCH - part * (n_rb - 1), part).to(tl.int64),
                          sem="release", scope="gpu")
    target = (epoch + 1) * EPOCH
    while _ld_acquire(grid_ptr) < target:
        pass
    tl.debug_barrier()
    _stamp(ts_ptr, pid, 4, TS)
    rc = tl.arange(0, BLOCK_RO)
    u_cols = u_ptr + cols.to(tl.int64)[None, :] * su_n
    h_rows = h_src + (rows.to(tl.int64) * R)[:, None]
    out = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_RO):
        ro = r0 + rc
        uc = tl.load(u_cols + ro[:, None], mask=c_ok[None, :] & (ro[:, None] < R), other=0.0)
        hc = tl.load(h_rows + ro[None, :], mask=row_ok[:, None] & (ro[None, :] < R), other=0.0, cache_modifier=".cg")
        out = _dot(hc.to(y_ptr.dtype.element_ty), uc, out)
    out += tl.load(bias_ptr + cols, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows.to(tl.int64)[:, None] * sy_m + cols[None, :], out.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & c_ok[None, :])
    _stamp(ts_ptr, pid, 5, TS)


class OneKernel:
    """One call's launch: grid (R / 16, SMs // (R / 16)), BLOCK_K 128, BLOCK_N 32 (tiles as the shipped
    BLOCK_M 64 kernels), BLOCK_M 16 or 64, 4 warps and 4 stages, launched as a programmatic dependent."""

    def __init__(self, m: int, k: int, r: int, n: int, atomic: bool, stamps: bool = False):
        self.m, self.k, self.r, self.n, self.atomic, self.stamps = m, k, r, n, atomic, stamps
        r_blocks, sms = triton.cdiv(r, 16), torch.cuda.get_device_properties(0).multi_processor_count
        ksplit = max(1, sms // r_blocks)  # at most one program per SM: 8 at r256 on the H200
        self.grid, programs = (r_blocks, ksplit), r_blocks * ksplit
        if programs > sms or n > programs * 32:
            raise ValueError(f"{programs} programs: more than the {sms} SMs, or too few for {n} columns")
        self.k_split = triton.cdiv(triton.cdiv(k, ksplit), 128) * 128
        f32 = dict(device="cuda", dtype=torch.float32)
        self.work = torch.zeros(2, m, r, **f32) if atomic else torch.empty(ksplit, m, r, **f32)
        self.h = torch.empty(m, r, device="cuda", dtype=torch.bfloat16)
        self.sem = torch.zeros(1 + self.grid[0], device="cuda", dtype=torch.int64)
        self.ts = torch.zeros(programs, len(STEPS), device="cuda", dtype=torch.int64)

    def __call__(self, x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, b: torch.Tensor, y: torch.Tensor) -> None:
        one_kernel[self.grid](x, V, U, b, y, self.work, self.h, self.sem, self.ts, self.m, self.k, self.r, self.n,
                              self.k_split, x.stride(0), V.stride(0), U.stride(0), y.stride(0), ATOMIC=self.atomic,
                              BLOCK_M=16 if self.m <= 16 else 64, BLOCK_K=128, BLOCK_R=16, BLOCK_N=32, BLOCK_RO=64,
                              TS=self.stamps, num_warps=4, num_stages=4, launch_pdl=True)


def inputs(m: int, k: int, r: int, n: int) -> tuple:
    dt = torch.bfloat16
    return (torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, r, device="cuda", dtype=dt) / r**0.5,
            torch.randn(r, k, device="cuda", dtype=dt) / k**0.5, torch.randn(n, device="cuda", dtype=dt))


def check(kernel: OneKernel, x, U, V, b) -> float:
    """Norm-wise error against float64 (h rounded to bf16, as two F.linear calls round it), over
    three calls into a NaN-poisoned output (the counters and accumulators carry across calls)."""
    ref = (x.double() @ V.double().T).to(torch.bfloat16).double() @ U.double().T + b.double()
    worst = 0.0
    for _ in range(3):
        y = torch.full((x.shape[0], U.shape[0]), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(x, U, V, b, y)
        worst = max(worst, ((y.double() - ref).norm() / ref.norm()).item())
    return worst


def table(shapes: list) -> None:
    timer = Timer(warmup=3, reps=40)
    print("| M | in | rank | out | neuralops (shipped chain) | cuBLAS (two F.linear) | one kernel, last-arriver "
          "| one kernel, atomic | errors (last-arriver, atomic) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for m, k, r, n in shapes:
        x, U, V, b = inputs(m, k, r, n)
        impls, errors = {}, []
        for be in ("triton", "cublas"):
            add_graphed_layers(impls, be, lambda U, V, b, be=be: low_rank.fwd(x, U, V, b, backend=be), (U, V, b))
        for form, atomic in FORMS.items():
            kernel = OneKernel(m, k, r, n, atomic)
            errors.append(check(kernel, x, U, V, b))
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            add_graphed_layers(impls, form, lambda U, V, b, kernel=kernel, y=y: kernel(x, U, V, b, y),
                               (U, V, b))
        # A form whose graph capture failed (add_graphed says why) has no time.
        times = {name.split(", graph")[0]: fn for name, fn in impls.items()}
        us = [f"{1e3 * timer.median_ms(times[c]):.2f}" if c in times else "-" for c in COLUMNS]
        print(f"| {m} | {k} | {r} | {n} | " + " | ".join(us) + f" | {errors[0]:.1e}, {errors[1]:.1e} |", flush=True)
        torch.cuda.empty_cache()


def timeline(m: int, k: int, r: int, n: int) -> None:
    x, U, V, b = inputs(m, k, r, n)
    copies = layer_copies((U, V, b))
    for form, atomic in FORMS.items():
        kernel = OneKernel(m, k, r, n, atomic, stamps=True)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        replay = graphed(lambda: [kernel(x, U_, V_, b_, y) for U_, V_, b_ in copies])
        for _ in range(5):
            replay()
        torch.cuda.synchronize()
        t = kernel.ts.double()
        t = (t - t[:, 0].min()) / 1e3
        print(f"M{m} in {k} rank {r} out {n}, {form}, last of {len(copies)} layers "
              "(us; min / median / max over programs):")
        for i, step in enumerate(STEPS):
            print(f"  {step:15s} {t[:, i].min():6.2f} {t[:, i].median():6.2f} {t[:, i].max():6.2f}")


def main() -> None:
    torch.manual_seed(0)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    shapes = [tuple(int(v) for v in a.split(":")) for a in args] or [(m, 4096, 256, 4096) for m in (16, 32, 64)]
    if "--timeline" in sys.argv:
        for shape in shapes:
            timeline(*shape)
    else:
        table(shapes)


if __name__ == "__main__":
    main()

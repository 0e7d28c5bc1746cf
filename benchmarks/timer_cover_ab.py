"""Small ops timed by neuralops.bench.timing.Timer with the cover it had before the twenty-seventh
session (cycles per ms calibrated on the process's first _sleep, which includes loading its module)
and with the fixed calibration, in alternation (results/linear_attn.md, twenty-seventh session).

    python benchmarks/timer_cover_ab.py      # with neuralops installed, on a machine with a GPU
"""
import torch
from neuralops.bench.timing import Timer
from neuralops.core.triton_kernels import gqa, low_rank, linear_attn as la

s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record(); torch.cuda._sleep(1_000_000); e.record(); torch.cuda.synchronize()
first_cpm = 1_000_000 / s.elapsed_time(e)
good = Timer(warmup=5, reps=50)
bad = Timer(warmup=5, reps=50)
bad._cycles_per_ms = first_cpm
print(f"cycles/ms: first sleep {first_cpm:.0f}, calibrated {good._cycles_per_ms:.0f}")
r = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16)
k, v = r(4, 8, 4096, 128), r(4, 8, 4096, 128)
x16, x64, U, V, b = r(16, 4096), r(64, 4096), r(4096, 256), r(256, 4096), r(4096)
q1, k1, v1 = r(1, 4, 1024, 64), r(1, 4, 1024, 64), r(1, 4, 1024, 64)
q4, k4, v4 = r(4, 16, 4096, 64), r(4, 16, 4096, 64), r(4, 16, 4096, 64)
cases = {
    "gqa fwd B4 Hkv8 H32 N4096 D128": lambda: gqa.fwd(k, v, 8, 32),
    "low_rank fwd M16 r256 4096x4096": lambda: low_rank.fwd(x16, U, V, b),
    "low_rank fwd M64 r256 4096x4096": lambda: low_rank.fwd(x64, U, V, b),
    "linear_attn causal fwd B1 H4 N1024 D64": lambda: la.fwd(q1, k1, v1, True),
    "linear_attn causal fwd B4 H16 N4096 D64": lambda: la.fwd(q4, k4, v4, True),
}
for name, fn in cases.items():
    res = []
    for rnd in range(2):
        res += [bad.median_ms(fn), good.median_ms(fn)]
    print(f"{name:42s} short cover {res[0]*1e3:8.2f} {res[2]*1e3:8.2f} us | fixed {res[1]*1e3:8.2f} {res[3]*1e3:8.2f} us", flush=True)

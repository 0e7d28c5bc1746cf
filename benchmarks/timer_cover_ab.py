"""Small ops timed by neuralops.bench.timing.Timer with the cover it had before the twenty-seventh
session (cycles per ms calibrated on the process's first _sleep, which includes loading its module)
and with the fixed calibration, in alternation (results/linear_attn.md, twenty-seventh session).

    python benchmarks/timer_cover_ab.py      # with neuralops installed, on a machine with a GPU
"""

import torch

from neuralops.bench.timing import Timer, sleep_cycles_per_ms
from neuralops.core.triton_kernels import gqa, linear_attn as la, low_rank


def main() -> None:
    first = sleep_cycles_per_ms()  # the old calibration: before any Timer, this process's first _sleep
    fixed, short = Timer(warmup=5, reps=50), Timer(warmup=5, reps=50)
    short._cycles_per_ms = first
    print(f"cycles/ms: first sleep {first:.0f}, calibrated {fixed._cycles_per_ms:.0f}")
    r = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16)  # noqa: E731
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
        us = [1e3 * t.median_ms(fn) for _ in range(2) for t in (short, fixed)]
        print(f"{name:42s} short cover {us[0]:8.2f} {us[2]:8.2f} us | fixed {us[1]:8.2f} {us[3]:8.2f} us",
              flush=True)


if __name__ == "__main__":
    main()

"""Per-kernel device times of linear-attention calls (torch profiler), beside each whole call's median,
for the installed neuralops: which kernel of a call moved between builds (results/linear_attn.md,
tenth session). Kernels launched as programmatic dependents start early and wait for the kernel
before them, so their durations overlap; read them against the same row of another build.

    python benchmarks/linear_attn_kernels.py [case ...]      # cases: see CASES; default all
"""

import statistics
import sys
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from neuralops.bench.timing import Timer
from neuralops.core.triton_kernels import linear_attn as la

# name -> (B, H, N, D, kind): kind "fwd" causal forward, "fb" causal forward+backward, "bi" bidirectional.
CASES = {
    "f64": (4, 16, 4096, 64, "fwd"), "fb64": (4, 16, 4096, 64, "fb"), "fb64s": (4, 16, 2048, 64, "fb"),
    "f128": (4, 16, 4096, 128, "fwd"), "f128L": (1, 16, 65536, 128, "fwd"), "fb128s": (4, 16, 2048, 128, "fb"),
    "fb128L": (1, 16, 65536, 128, "fb"), "b64": (4, 16, 4096, 64, "bi"), "b128": (4, 16, 4096, 128, "bi"),
    "b128L": (1, 16, 65536, 128, "bi"),
}


def _call(b: int, h: int, n: int, d: int, kind: str) -> Callable[[], object]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_(kind == "fb")
               for _ in range(3))
    if kind != "fb":
        return lambda: la.fwd(q, k, v, kind == "fwd")
    grad_out = torch.randn_like(q)

    def step() -> None:
        for t in (q, k, v):
            t.grad = None
        la.fwd(q, k, v, True).backward(grad_out)

    return step


def kernel_times(fn: Callable[[], object], iters: int = 10) -> list[tuple[str, float]]:
    """(kernel, median us) for each linear-attention kernel of one call, in launch order."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("la_")),
                    key=lambda e: e.time_range.start)
    per_call = len(events) // iters
    return [(events[i].name.removeprefix("la_").removesuffix("_kernel"),
             statistics.median(events[j * per_call + i].time_range.elapsed_us() for j in range(iters)))
            for i in range(per_call)]


def main() -> None:
    timer = Timer(warmup=3, reps=25)
    for name in sys.argv[1:] or list(CASES):
        fn = _call(*CASES[name])
        ms = timer.median_ms(fn)
        kernels = " ".join(f"{k}:{us:.1f}" for k, us in kernel_times(fn))
        print(f"{name:7s} {ms:8.4f} ms  | {kernels}", flush=True)


if __name__ == "__main__":
    main()

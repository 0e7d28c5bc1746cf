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

from linear_attn_calls import fwd_bwd_case, fwd_case  # this script's directory: sys.path[0]
from neuralops.bench.timing import Timer

# name -> the call, as benchmarks/linear_attn_calls.py builds it (bf16 unless marked: h, fp16; f, fp32).
CASES = {
    "f64": lambda: fwd_case(4, 16, 4096, 64, True), "f128": lambda: fwd_case(4, 16, 4096, 128, True),
    "f128L": lambda: fwd_case(1, 16, 65536, 128, True), "fb64": lambda: fwd_bwd_case(4, 16, 4096, 64),
    "fb64s": lambda: fwd_bwd_case(4, 16, 2048, 64), "fb128s": lambda: fwd_bwd_case(4, 16, 2048, 128),
    "fb128L": lambda: fwd_bwd_case(1, 16, 65536, 128), "b64": lambda: fwd_case(4, 16, 4096, 64, False),
    "b128": lambda: fwd_case(4, 16, 4096, 128, False), "b128L": lambda: fwd_case(1, 16, 65536, 128, False),
    "fb64h": lambda: fwd_bwd_case(4, 16, 4096, 64, torch.float16),
    "fb64L": lambda: fwd_bwd_case(1, 16, 32768, 64),
    "fb128Li": lambda: fwd_bwd_case(1, 16, 65536, 128, phi="identity"),
    "fb128si": lambda: fwd_bwd_case(4, 16, 2048, 128, phi="identity"),
    "fb128Lr": lambda: fwd_bwd_case(1, 16, 65536, 128, phi="relu"),
    "fb128sr": lambda: fwd_bwd_case(4, 16, 2048, 128, phi="relu"),
    "f256": lambda: fwd_case(4, 16, 4096, 256, True), "fb256": lambda: fwd_bwd_case(4, 16, 4096, 256),
    "b256": lambda: fwd_case(4, 16, 4096, 256, False),
    "fbc128": lambda: fwd_bwd_case(4, 16, 4096, 128, cosformer=True),
    "bc128": lambda: fwd_case(4, 16, 4096, 128, False, cosformer=True),
    "fc128": lambda: fwd_case(4, 16, 4096, 128, True, cosformer=True),
    "fbc256": lambda: fwd_bwd_case(4, 16, 4096, 256, cosformer=True),
    "bc256": lambda: fwd_case(4, 16, 4096, 256, False, cosformer=True),
    "fc256": lambda: fwd_case(4, 16, 4096, 256, True, cosformer=True),
    "fbc256h": lambda: fwd_bwd_case(4, 16, 4096, 256, torch.float16, cosformer=True),
    "fb64f": lambda: fwd_bwd_case(4, 16, 4096, 64, torch.float32),
    "fb128f": lambda: fwd_bwd_case(4, 16, 2048, 128, torch.float32),
    "fb256f": lambda: fwd_bwd_case(4, 16, 2048, 256, torch.float32),
    "fbc128f": lambda: fwd_bwd_case(4, 16, 2048, 128, torch.float32, cosformer=True),
}


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
        _, fn = CASES[name]()
        ms = timer.median_ms(fn)
        kernels = " ".join(f"{k}:{us:.1f}" for k, us in kernel_times(fn))
        print(f"{name:7s} {ms:8.4f} ms  | {kernels}", flush=True)


if __name__ == "__main__":
    main()

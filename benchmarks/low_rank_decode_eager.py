"""Eager decode-sized low-rank calls, host included: per-call time of `low_rank.fwd` against two
`F.linear` calls (and the op's overload, without the fast path, and each backend forced) when each
is called back to back, the way an eager decode loop calls them. bf16, in = out = 4096, r = 256; best of 5 loops of 2000
calls after 500 warm-up calls. (benchmarks/low_rank_decode_floor.py times the GPU alone, in graphs.)

    python benchmarks/low_rank_decode_eager.py        # with neuralops installed, on a machine with a GPU
"""

import time
from typing import Callable

import torch
import torch.nn.functional as F

from neuralops.core.triton_kernels import low_rank


def per_call_us(fn: Callable[[], object], reps: int = 2000) -> float:
    for _ in range(500):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / reps * 1e6)
    return best


def main() -> None:
    torch.manual_seed(0)
    for m in (1, 16, 32, 64):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        V = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16) / 64
        U = torch.randn(4096, 256, device="cuda", dtype=torch.bfloat16) / 16
        ours = per_call_us(lambda: low_rank.fwd(x, U, V))
        pair = per_call_us(lambda: F.linear(F.linear(x, V), U))
        overload = per_call_us(lambda: low_rank._FWD.overload(x, U, V, None, backend="auto"))
        forced = {b: per_call_us(lambda: low_rank.fwd(x, U, V, backend=b)) for b in ("triton", "cublas")}
        print(f"M{m} r256 4096x4096 ({low_rank.route(x, U, V)}): low_rank.fwd {ours:.2f} us "
              f"(its overload {overload:.2f}; triton {forced['triton']:.2f}, cublas {forced['cublas']:.2f}), "
              f"two F.linear {pair:.2f} us: {pair / ours:.2f}x", flush=True)


if __name__ == "__main__":
    main()

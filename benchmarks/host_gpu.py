"""Host time per call on a GPU machine, broken down: the Python API, the op's eager fast path
(neuralops._fastcall) and its overload, the op raising, and torch's own calls beside them (the
reference `torch.add` of #3's host-time target).

Tiny tensors, so the time is the host's. The rows take turns: 7 rounds, each timing 2000 calls of
every row in order, and each row keeps its best round, so a host that slows down for a while (a
shared machine) slows every row alike instead of the rows that ran then. The last column is the
row's time over `torch.add`'s. Compare with benchmarks/host_python.py, which times the Python layer
alone with the op stubbed (CPU).

    python benchmarks/host_gpu.py        # with neuralops installed, on a machine with a GPU
"""

import time
from typing import Callable

import torch
import torch.nn.functional as F

from neuralops.core.triton_kernels import gqa
from neuralops.core.triton_kernels import linear_attn as la
from neuralops.core.triton_kernels import low_rank


def loop_us(fn: Callable[[], object], reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / reps * 1e6


def host_us(rows: dict[str, Callable[[], object]], rounds: int = 7, reps: int = 2000) -> dict[str, float]:
    for fn in rows.values():
        loop_us(fn, 200)
    best = {name: float("inf") for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            best[name] = min(best[name], loop_us(fn, reps))
    return best


def main() -> None:
    op = torch.ops.neuralops.linear_attn_fwd.default
    x, y = (torch.randn(1, 1, 8, 16, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    kv = torch.randn(1, 2, 8, 16, device="cuda", dtype=torch.bfloat16)
    args = (None, None, None, None, "elu+1", True, 1e-6, 1.0, False)

    def raising() -> None:
        try:
            op(x, x, y, None, None, None, None, "gelu", True, 1e-6, 1.0, False)
        except ValueError:
            pass

    fast = la._FWD.eager
    xs, U, V = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for shape in ((1, 64), (64, 16), (16, 64)))
    rows = {
        "linear_attn.fwd (causal, N8 D16)": lambda: la.fwd(x, x, y, True),
        "the op's fast path": lambda: fast(x, x, y, *args),
        "the op's overload": lambda: op(x, x, y, *args),
        "the op raising (bad phi)": raising,
        "gqa.fwd": lambda: gqa.fwd(kv, kv, 2, 4),
        "low_rank.fwd (M1, 64 -> 16 -> 64)": lambda: low_rank.fwd(xs, U, V),
        "two F.linear (the same)": lambda: F.linear(F.linear(xs, V), U),
        "torch.add": lambda: torch.add(x, y),
        "torch.ops.aten.add.Tensor": lambda: torch.ops.aten.add.Tensor(x, y),
        "torch.empty(0) on CUDA": lambda: torch.empty(0, device="cuda"),
    }
    times = host_us(rows)
    for name, us in times.items():
        print(f"{name:36s} {us:6.2f} us  {us / times['torch.add']:5.2f}x", flush=True)


if __name__ == "__main__":
    main()

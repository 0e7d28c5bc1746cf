"""Host time per call on a GPU machine, broken down: the Python API, the op's overload, the op
raising, and torch's own calls beside them (the reference `torch.add` of #3's host-time target).
Best of 5 loops of 3000 calls on tiny tensors, so the time is the host's; compare with
benchmarks/host_python.py, which times the Python layer alone with the op stubbed (CPU).

    python benchmarks/host_gpu.py        # with neuralops installed, on a machine with a GPU
"""

import time
from typing import Callable

import torch

from neuralops.core.triton_kernels import gqa
from neuralops.core.triton_kernels import linear_attn as la


def host_us(fn: Callable[[], object], reps: int = 3000) -> float:
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps * 1e6)
        torch.cuda.synchronize()
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

    rows = {
        "linear_attn.fwd (causal, N8 D16)": lambda: la.fwd(x, x, y, True),
        "the op's overload": lambda: op(x, x, y, *args),
        "the overload's _op": lambda: op._op(x, x, y, *args),
        "the op raising (bad phi)": raising,
        "gqa.fwd": lambda: gqa.fwd(kv, kv, 2, 4),
        "torch.add": lambda: torch.add(x, y),
        "torch.ops.aten.add.Tensor": lambda: torch.ops.aten.add.Tensor(x, y),
        "torch.empty(0) on CUDA": lambda: torch.empty(0, device="cuda"),
    }
    for name, fn in rows.items():
        print(f"{name:36s} {host_us(fn):6.2f} us", flush=True)


if __name__ == "__main__":
    main()

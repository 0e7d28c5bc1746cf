"""The Python layer's share of an op call's host time, on any machine (no GPU needed).

Times ``linear_attn.fwd``, ``low_rank.fwd`` and ``gqa.fwd`` on small CPU tensors with their ops replaced by
stubs and the per-device readiness test answering yes: what remains is the Python between the
call and the op (argument parsing, the kernel-route test). ``torch.add`` on the same tensors is
printed beside it as the scale. Best of 7 rounds of 100000 calls, in microseconds.

    python benchmarks/host_python.py       # the checkout's neuralops (the library need not load)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from neuralops._library import Op  # noqa: E402
from neuralops.core.triton_kernels import gqa, linear_attn, low_rank  # noqa: E402


def best_us(fn: Callable[[], object], reps: int = 100_000, rounds: int = 7) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps * 1e6)
    return best


def main() -> None:
    q = torch.randn(1, 1, 8, 16, dtype=torch.bfloat16)
    x, U, V, b = torch.randn(16, 64), torch.randn(32, 8), torch.randn(8, 64), torch.randn(32)
    kv = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    def stub(result: object) -> Op:
        return Op(lambda *args, **kwargs: result, lambda *args: result, lambda *args: result)

    linear_attn._FWD = stub((q, q, q))
    low_rank._FWD = stub(x)
    gqa._OPS = {"gqa_fwd": stub((kv, kv))}
    for module in (linear_attn, low_rank, gqa):
        module.kernels_ready = lambda tensor: True
    rows = [
        ("linear_attn.fwd, op stubbed", best_us(lambda: linear_attn.fwd(q, q, q, True))),
        ("low_rank.fwd, op stubbed", best_us(lambda: low_rank.fwd(x, U, V, b))),
        ("gqa.fwd, op stubbed", best_us(lambda: gqa.fwd(kv, kv, 2, 8))),
        ("torch.add (CPU)", best_us(lambda: torch.add(q, q))),
    ]
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")
    for name, us in rows:
        print(f"{name:32s} {us:6.2f} us")


if __name__ == "__main__":
    main()

"""GPU timing: median of per-repetition CUDA-event times, and the machine's two ceilings."""

from __future__ import annotations

import statistics
from typing import Any, Callable

import torch

_L2_FLUSH_BYTES = 256 * 1024 * 1024  # several times any current L2


class Timer:
    """Times callables on the current CUDA device, flushing L2 before each repetition."""

    def __init__(self, warmup: int = 5, reps: int = 50) -> None:
        self.warmup, self.reps = warmup, reps
        self._flush = torch.empty(_L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def median_ms(self, fn: Callable[[], Any]) -> float:
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for start, end in zip(starts, ends):
            self._flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def graphed(fn: Callable[[], Any]) -> Callable[[], None]:
    """``fn`` captured in a CUDA graph, as its replay: timing the replay gives the GPU's time without
    the host's per-launch cost, the way serving loops run decode steps (and where a small op's time
    is otherwise the host's)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture: first calls may allocate or load modules
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def add_graphed(impls: dict[str, Callable[[], Any]], name: str, fn: Callable[[], Any]) -> None:
    """impls[name] = graphed(fn), or a printed reason when fn cannot be captured (the case still runs)."""
    try:
        impls[name] = graphed(fn)
    except RuntimeError as exc:
        print(f"[bench] {name}: not timed, CUDA graph capture failed: {exc}")


def copy_bandwidth(timer: Timer, nbytes: int = 2 * 1024**3) -> float:
    """Device-to-device copy rate in bytes/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = timer.median_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3)


def matmul_rate(timer: Timer, n: int = 8192) -> float:
    """bf16 matmul rate in FLOP/s on random data."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = timer.median_ms(lambda: a @ b)
    return 2 * n**3 / (ms * 1e-3)

"""GPU timing: median of per-repetition CUDA-event times, and the machine's two ceilings."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

import torch

_L2_FLUSH_BYTES = 256 * 1024 * 1024  # several times any current L2
# What the weight copies of a graph of layers add up to at least: over twice the L2 of an H100 or
# H200 (50 and 60 MB), so a replay finds none of a layer's weights there from the previous one.
_LAYERS_MIN_BYTES = 128 * 1024 * 1024


def sleep_cycles_per_ms(cycles: int = 1_000_000) -> float:
    """GPU clock cycles per ms of ``torch.cuda._sleep``, from one sleep of ``cycles`` timed with events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / start.elapsed_time(end)


class PerCall:
    """``fn`` makes ``calls`` calls of the operation being timed; Timer reports the time of one."""

    def __init__(self, fn: Callable[[], Any], calls: int) -> None:
        self.fn, self.calls = fn, calls

    def __call__(self) -> Any:
        return self.fn()


class Timer:
    """Times callables on the current CUDA device: the GPU's time, L2 flushed before each repetition.

    Before each repetition's start event the GPU also spins for longer than the host takes to queue
    ``fn`` (measured in the warm-up), so the events time the kernels and not the host's launch rate:
    an op whose host path (Python, autograd) outlasts its kernels would otherwise be timed by the
    host, differently from one run and one position in the table to the next. Host cost per call is
    measured on its own (``python -m neuralops.bench.linear_attn --startup``)."""

    def __init__(self, warmup: int = 5, reps: int = 50) -> None:
        self.warmup, self.reps = warmup, reps
        self._flush = torch.empty(_L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        # The process's first _sleep loads its module (CUDA's lazy loading) between the events: on the
        # H200 that made 10^6 cycles take 11.4 ms instead of 0.53, and every cover 20x too short.
        torch.cuda._sleep(1)
        torch.cuda.synchronize()
        self._cycles_per_ms = sleep_cycles_per_ms()

    def median_ms(self, fn: Callable[[], Any]) -> float:
        """Median time of ``fn`` (of one of its calls, for a PerCall), in ms."""
        host_ms = 0.0
        for i in range(max(self.warmup, 2)):
            t0 = time.perf_counter()
            fn()
            # The first call's host time includes one-time costs (lazy imports, module loads, the
            # allocator's first blocks): a cover sized by it would sleep that long before every
            # repetition.
            if i > 0:
                host_ms = max(host_ms, 1e3 * (time.perf_counter() - t0))
            torch.cuda.synchronize()
        cover = int(self._cycles_per_ms * (2 * host_ms + 0.05))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for start, end in zip(starts, ends):
            self._flush.zero_()
            torch.cuda._sleep(cover)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()  # the next repetition's cover must not start behind this one's kernels
        calls = fn.calls if isinstance(fn, PerCall) else 1
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / calls


class Replay:
    """A captured CUDA graph's replay. It holds the callable it captured, and so the tensors that
    callable references: the graph holds their addresses, not the tensors, and replaying it after
    they were freed reads or writes whatever reuses the memory."""

    def __init__(self, graph: torch.cuda.CUDAGraph, captured: Callable[[], Any]) -> None:
        self.graph, self.captured = graph, captured

    def __call__(self) -> None:
        self.graph.replay()


def graphed(fn: Callable[[], Any]) -> Replay:
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
    return Replay(graph, fn)


def add_graphed(impls: dict[str, Callable[[], Any]], name: str, fn: Callable[[], Any], calls: int = 1) -> None:
    """impls[name] = graphed(fn), timed per call when fn makes ``calls`` of them; or a printed reason
    when fn cannot be captured (the case still runs)."""
    try:
        replay = graphed(fn)
    except RuntimeError as exc:
        print(f"[bench] {name}: not timed, CUDA graph capture failed: {exc}")
        return
    impls[name] = replay if calls == 1 else PerCall(replay, calls)


def add_graphed_layers(impls: dict[str, Callable[[], Any]], label: str, fn: Callable[..., Any],
                       weights: Sequence[torch.Tensor]) -> None:
    """impls[f"{label}, graph of {L} layers"]: a CUDA graph that calls ``fn(*w)`` once for each of L
    copies ``w`` of ``weights``, replayed and timed per call: a serving loop's view of a layer.

    The copies add up to over twice the L2, so every call reads its weights from DRAM, as a model's
    layers do one after the other. In a graph of one call the replay's fixed cost (about 3 us on the
    H200) adds to a call of a few us and hides differences between kernels; here L calls share it.
    """
    copies = layer_copies(weights)
    add_graphed(impls, f"{label}, graph of {len(copies)} layers", lambda: [fn(*w) for w in copies],
                calls=len(copies))


def layer_copies(weights: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Copies of ``weights``, at least two and enough to add up to over twice the L2: a graph that
    calls an op once per copy reads each call's weights from DRAM, as a model's layers do."""
    per_layer = sum(t.numel() * t.element_size() for t in weights)
    layers = max(2, -(-_LAYERS_MIN_BYTES // per_layer))
    return [[t.clone() for t in weights] for _ in range(layers)]


def kernel_spans(fn: Callable[[], Any]) -> list[tuple[str, float, float]]:
    """(name, start, end) of each CUDA activity (kernels, copies) that ``fn`` runs, in us on the
    GPU's clock, in the order they start: a torch profiler trace of one call, for timeline tools."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(spans, key=lambda span: span[1])


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

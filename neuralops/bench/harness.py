"""Runs benchmark cases side by side and reports them against the memory and FLOP floors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from neuralops.bench.timing import Timer


@dataclass
class Case:
    """One shape of one op: the implementations to time and the work any of them must do.

    ``bytes``: each input read once and each output written once; ``flops``: the arithmetic of the
    cheapest algorithm. The first implementation is neuralops; the others are its peers.
    """

    op: str
    shape: str
    bytes: int
    flops: int
    impls: dict[str, Callable[[], Any]] = field(default_factory=dict)


@dataclass
class Row:
    op: str
    shape: str
    impl: str
    ms: float
    floor_ms: float
    bound: str      # "memory" or "compute": which floor is larger
    tbps: float     # bytes / time, in TB/s
    tflops: float   # flops / time, in TFLOP/s
    speedup: float  # this implementation's time over neuralops' (peers > 1 when neuralops wins)

    @property
    def x_floor(self) -> float:
        return self.ms / self.floor_ms


def run(cases: list[Case], timer: Timer, bandwidth: float, flop_rate: float,
        log: Callable[[str], None] = print) -> list[Row]:
    rows = []
    for case in cases:
        memory_ms = case.bytes / bandwidth * 1e3
        compute_ms = case.flops / flop_rate * 1e3
        floor_ms = max(memory_ms, compute_ms)
        bound = "memory" if memory_ms >= compute_ms else "compute"
        first = None
        for impl, fn in case.impls.items():
            ms = timer.median_ms(fn)
            first = ms if first is None else first
            row = Row(case.op, case.shape, impl, ms, floor_ms, bound, case.bytes / ms / 1e9,
                      case.flops / ms / 1e9, ms / first)
            log(f"{case.op:12s} {case.shape:42s} {impl:28s} {ms:9.4f} ms  {row.x_floor:6.2f}x floor")
            rows.append(row)
    return rows


def markdown(rows: list[Row]) -> str:
    out = ["| op | shape | implementation | median ms | TB/s | TFLOP/s | floor ms (bound) | x floor | time / neuralops |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r.op} | {r.shape} | {r.impl} | {r.ms:.4f} | {r.tbps:.2f} | {r.tflops:.1f} | "
                   f"{r.floor_ms:.4f} ({r.bound}) | {r.x_floor:.2f} | {r.speedup:.2f} |")
    return "\n".join(out)

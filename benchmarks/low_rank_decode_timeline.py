"""When each kernel of low-rank decode calls starts and ends on the GPU, in a CUDA graph of 32
layers (torch profiler over one replay): shows how the chained kernels overlap (programmatic
dependent launch) and what each phase of a call costs once the kernel before it has ended. bf16,
one input for every layer, each layer its own weights (128 MB or more in all, so each call reads its
weights from DRAM). Prints the kernels of layers 10 to 12, times in us from layer 10's first kernel.

    python benchmarks/low_rank_decode_timeline.py M IN RANK OUT [triton|cublas]

Read a phase as the gap between the end of one kernel and the end of the next: each waits for the
one before it (griddepcontrol.wait) and then does its work.
"""

import sys

import torch

from neuralops.core.triton_kernels import low_rank

LAYERS = 32
SHOWN = range(10, 13)


def main() -> None:
    m, k, r, n = (int(a) for a in sys.argv[1:5])
    backend = sys.argv[5] if len(sys.argv) > 5 else "triton"
    gen = torch.Generator(device="cuda").manual_seed(0)
    dt = torch.bfloat16

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=dt, generator=gen) * scale

    x = randn(m, k)
    layers = [(randn(n, r, scale=r**-0.5), randn(r, k, scale=k**-0.5), randn(n)) for _ in range(LAYERS)]

    def step() -> None:
        for U, V, b in layers:
            low_rank.fwd(x, U, V, b, backend=backend)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as CUDA graphs require
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA and "emcpy" not in e.name),
                    key=lambda e: e.time_range.start)
    per_layer = len(events) // LAYERS
    shown = events[SHOWN.start * per_layer:SHOWN.stop * per_layer]
    t0 = shown[0].time_range.start
    span = events[-1].time_range.end - events[0].time_range.start
    print(f"M{m} in {k} rank {r} out {n}, {backend}: {per_layer} kernels per call, "
          f"replay {span / LAYERS:.2f} us per call")
    for e in shown:
        start, end = e.time_range.start - t0, e.time_range.end - t0
        print(f"  {e.name[:34]:34s} start {start:7.2f}  end {end:7.2f}  ({end - start:.2f} us)")


if __name__ == "__main__":
    main()

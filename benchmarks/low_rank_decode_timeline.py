"""When each kernel of low-rank decode calls starts and ends on the GPU, in a CUDA graph of layers
(timing.layer_copies: each layer its own copy of the weights, so each call reads its weights from
DRAM; one input for all): shows how the chained kernels overlap (programmatic dependent launch) and
what each step of a call costs once the kernel before it has ended. bf16, torch profiler over one
replay. Prints the kernels of the three middle layers, times in us from the first one's start.

    python benchmarks/low_rank_decode_timeline.py M IN RANK OUT [triton|cublas]

Read a step as the gap between the end of one kernel and the end of the next: each waits for the
one before it (griddepcontrol.wait) and then does its work.
"""

import sys

import torch

from neuralops.bench.timing import graphed, kernel_spans, layer_copies
from neuralops.core.triton_kernels import low_rank


def main() -> None:
    m, k, r, n = (int(a) for a in sys.argv[1:5])
    backend = sys.argv[5] if len(sys.argv) > 5 else "triton"
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen) * scale

    x = randn(m, k)
    copies = layer_copies((randn(n, r, scale=r**-0.5), randn(r, k, scale=k**-0.5), randn(n)))
    replay = graphed(lambda: [low_rank.fwd(x, U, V, b, backend=backend) for U, V, b in copies])
    for _ in range(5):
        replay()
    spans = [s for s in kernel_spans(replay) if "emcpy" not in s[0]]
    layers = len(copies)
    per_layer = len(spans) // layers
    first = max(0, layers // 2 - 1)
    shown = spans[first * per_layer:(first + 3) * per_layer]
    t0 = shown[0][1]
    print(f"M{m} in {k} rank {r} out {n}, {backend}: {layers} layers, {per_layer} kernels per call, "
          f"replay {(spans[-1][2] - spans[0][1]) / layers:.2f} us per call")
    for name, start, end in shown:
        print(f"  {name[:34]:34s} start {start - t0:7.2f}  end {end - t0:7.2f}  ({end - start:.2f} us)")


if __name__ == "__main__":
    main()

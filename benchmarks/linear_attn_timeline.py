"""When each kernel of linear-attention calls starts and ends on the GPU (torch profiler, three calls
back to back after warm-up): shows which kernels overlap (programmatic dependent launch) and what
each takes. bf16, causal, elu+1; the plain forward or, with --train, linear_attn_fwd_train (the
autograd forward). The first call's start waits on the profiler's own; read the later two.

    python benchmarks/linear_attn_timeline.py B H N D [--train]
"""

import sys

import torch

import neuralops  # noqa: F401 (registers the ops)
from neuralops.bench.timing import kernel_spans


def main() -> None:
    b, h, n, d = (int(x) for x in sys.argv[1:5])
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    args = (q, k, v, None, None, None, None, "elu+1", True, 1e-6, 1.0, False)
    op = torch.ops.neuralops.linear_attn_fwd_train if "--train" in sys.argv else torch.ops.neuralops.linear_attn_fwd
    for _ in range(5):
        op(*args)
    torch.cuda.synchronize()
    spans = kernel_spans(lambda: [op(*args) for _ in range(3)])
    t0 = spans[0][1]
    for name, start, end in spans:
        print(f"{name[:32]:32s} start {start - t0:7.1f} us  end {end - t0:7.1f} us  ({end - start:.1f} us)")


if __name__ == "__main__":
    main()

"""SDPA's causal softmax attention, forward and forward+backward, on one backend, bf16, B4 H16,
N 2048 / 4096, D 64 / 128: the peers of the issue's "fwd+bwd faster than SDPA" rows
(results/linear_attn.md, twentieth session). Each figure is the median of 20 calls, each timed alone
with CUDA events (host time included, no L2 flush), after 3 warm-up calls.

    python benchmarks/sdpa_backends.py flash|cudnn|efficient
"""

import statistics
import sys
from typing import Callable

import torch
import torch.nn.functional as F


def median_ms(fn: Callable[[], object], reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    name = sys.argv[1]
    backend = {"flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION,
               "cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
               "efficient": torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION}[name]
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    for b, h, n, d in [(4, 16, 2048, 64), (4, 16, 2048, 128), (4, 16, 4096, 64), (4, 16, 4096, 128)]:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        grad = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)

        def fwd_bwd() -> None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(out, (q, k, v), grad)

        with torch.nn.attention.sdpa_kernel(backend):
            fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            print(f"sdpa {name} causal fwd     B{b} H{h} N{n} D{d}: {fwd:.4f} ms", flush=True)
            print(f"sdpa {name} causal fwd+bwd B{b} H{h} N{n} D{d}: {median_ms(fwd_bwd):.4f} ms", flush=True)


if __name__ == "__main__":
    main()

"""Sweeps the GQA kernels' tile sizes, warps and pipeline stages with the Triton JIT on a GPU, to
choose what triton_src/gqa/spec.py builds. A development tool: it needs Triton and a GPU; neuralops
does not.

    python benchmarks/tune_gqa.py            # from the repository root
"""

import itertools
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from triton_src.gqa import kernels  # noqa: E402


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def main() -> None:
    b, hkv, h, n, d = 4, 8, 32, 4096, 128
    n_rep = h // hkv
    print(f"B{b} Hkv{hkv} H{h} N{n} D{d}; ms per tensor and TB/s (bytes read + written)")
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype)
        g = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
        out = torch.empty(b, h, n, d, device="cuda", dtype=dtype)
        red = torch.empty(b, hkv, n, d, device="cuda", dtype=dtype)
        nbytes = (x.numel() + out.numel()) * x.element_size()
        ref = torch.repeat_interleave(x, n_rep, 1)
        for tile_kb, warps, stages in itertools.product((8, 16, 32), (4, 8), (1, 2, 3)):
            block_d = 128
            block_n = tile_kb * 1024 // (block_d * x.element_size())
            grid = (b * hkv * triton.cdiv(n, block_n),)
            args = (hkv, n, d, n_rep, *x.stride()[:3], *out.stride()[:3])
            meta = dict(BLOCK_N=block_n, BLOCK_D=block_d, num_warps=warps, num_stages=stages)
            expand = lambda: kernels.gqa_expand_kernel[grid](x, out, *args, **meta)
            expand()
            assert torch.equal(out, ref)
            rargs = (hkv, n, d, n_rep, *g.stride()[:3], *red.stride()[:3])
            reduce = lambda: kernels.gqa_reduce_kernel[grid](g, red, *rargs, **meta)
            te, tr = bench(expand), bench(reduce)
            print(f"{str(dtype):15s} tile {tile_kb:2d} KB warps {warps} stages {stages}: "
                  f"expand {te:.4f} ms {nbytes / te / 1e9:5.2f} TB/s | reduce {tr:.4f} ms {nbytes / tr / 1e9:5.2f} TB/s")
        te = bench(lambda: torch.repeat_interleave(x, n_rep, 1))
        tr = bench(lambda: g.view(b, hkv, n_rep, n, d).sum(2))
        print(f"{str(dtype):15s} peers: repeat_interleave {te:.4f} ms {nbytes / te / 1e9:5.2f} TB/s | "
              f"view.sum {tr:.4f} ms {nbytes / tr / 1e9:5.2f} TB/s")


if __name__ == "__main__":
    main()

"""Sweeps the linear attention kernels' tiles (chunk rows, the other tile, warps, stages) and the
segment count with the Triton JIT on a GPU, to choose what triton_src/linear_attn/spec.py builds.
A development tool: it needs Triton and a GPU; neuralops does not. Runs the kernels through
tests/linear_attn_driver.py, which mirrors csrc/ops/linear_attn.cpp.

    python benchmarks/tune_linear_attn.py [--budget SECONDS] [--json PATH]   # from the repo root
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import linear_attn_driver as drv  # noqa: E402
from triton_src.linear_attn import spec  # noqa: E402

SHAPES = [(4, 16, 4096, 64), (1, 16, 65536, 128)]  # B, H, N, D (= Dv), the two shapes
FWD_TILES = [  # (C, BT, warps, stages)
    (64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 8, 2), (64, 64, 8, 2),
]
# Tiles whose feature block is narrower than D (BT < D here) hit an illegal address in Triton 3.6's
# JIT on the H200 (C64 T32): only tiles with BT >= D are swept for the dq / dk kernels.
BWD_TILES = [(64, 64, 4, 2), (64, 64, 4, 3)]
PROGRAMS_PER_SM = (4, 8, 16)


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=240.0, help="stop sweeping after this many seconds")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--shapes", default="0,1", help="indices into SHAPES")
    args = ap.parse_args()
    start = time.monotonic()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for b, h, n, d in [SHAPES[int(i)] for i in args.shapes.split(",")]:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        block = drv.block_for("bf16", d)
        ref = drv.forward(q, k, v, causal=True)[0]  # the built tiles, for a correctness check of each config
        saved, saved_v = spec.TILES[("bf16", block)], spec.VALUE_TILES[("bf16", block)]
        for kind, tiles in (("fwd", FWD_TILES), ("bwd", BWD_TILES)):
            for tile, pps in itertools.product(tiles, PROGRAMS_PER_SM):
                if time.monotonic() - start > args.budget:
                    break
                if kind == "fwd":
                    spec.TILES[("bf16", block)] = tile
                    fn = lambda: drv.forward(q, k, v, causal=True, target_programs=pps * sms)  # noqa: E731
                else:
                    spec.VALUE_TILES[("bf16", block)] = tile
                    fn = lambda: drv.backward(do, q, k, v, causal=True, target_programs=pps * sms)  # noqa: E731
                try:
                    if kind == "fwd":
                        err = ((fn()[0].float() - ref.float()).norm() / ref.float().norm()).item()
                    else:
                        fn()
                        err = 0.0
                    ms = bench(fn)
                except Exception as exc:  # a tile that does not compile (shared memory) or fails
                    ms, err = float("nan"), float("nan")
                    print(f"  {kind} {tile} pps{pps}: {type(exc).__name__}: {str(exc)[:120]}")
                rows.append(dict(shape=f"B{b} H{h} N{n} D{d}", kind=kind, tile=tile, pps=pps, ms=ms, err=err))
                print(f"B{b} H{h} N{n} D{d} {kind} C,T,warps,stages={tile} programs/SM={pps}: {ms:.4f} ms"
                      f" (rel diff {err:.1e})", flush=True)
            spec.TILES[("bf16", block)], spec.VALUE_TILES[("bf16", block)] = saved, saved_v
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("\nbest per shape and pass:")
    for key in sorted({(r["shape"], r["kind"]) for r in rows}):
        ok = [r for r in rows if (r["shape"], r["kind"]) == key and r["ms"] == r["ms"]]
        if ok:
            best = min(ok, key=lambda r: r["ms"])
            print(f"  {key[0]} {key[1]}: {best['ms']:.4f} ms with C,T,warps,stages={best['tile']} programs/SM={best['pps']}")


if __name__ == "__main__":
    main()

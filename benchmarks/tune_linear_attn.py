"""Sweeps the linear attention kernels' tiles (chunk rows C, the other tile T, warps, stages) with the
Triton JIT on a GPU, to choose what triton_src/linear_attn/spec.py builds (STATE_TILES, FWD_TILES,
VALUE_TILES). A development tool: it needs Triton and a GPU; neuralops does not. Runs the kernels
through tests/linear_attn_driver.py, which mirrors csrc/ops/linear_attn.cpp.

The state pass and the forward (causal, or bidirectional: BIDIR_FWD_TILES) are timed each alone,
with the segments the op would use for each tile (the driver's state_sums and fwd_pass); the
backward is timed whole (dq, dv, dk and the scans) per VALUE_TILES candidate, and bidir_call times
whole bidirectional calls per forward tile and segment length. The JIT specializes integer
arguments equal to 1 and Triton's version on the GPU machine may differ from the build's: check the
built cubins' registers and spills with benchmarks/cubin_stats.py before trusting a tile. A tile for
spec.py's shared tables must fit sm_80 (benchmarks/aot_with_tile.py with ARCHS=80); one that needs
sm_90's shared memory goes in ARCH_TILES. The driver uses the tiles of the GPU it runs on, and a
candidate replaces them on every architecture and feature map (spec.replace_tile).

    python benchmarks/tune_linear_attn.py [--budget SECONDS] [--json PATH] [--shapes 0,1,2,3] \
        [--kinds state,fwd,bidir,bidir_call,bwd] [--cosformer] [--seg-len ROWS] \
        [--tiles "C,T,W,S;..."]   # from the repo root

A state-pass candidate may carry a fifth number, its feature tile (spec.STATE_TILES, "C,T,W,S,BF").
--cosformer runs the kernels with Cosformer weights (their run-time-map variant, FEAT 0: 128
features take the 256-feature block, 256 the 512-feature block).
"""

from __future__ import annotations

import argparse
import json
import math
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

# B, H, N, D (= Dv): the two shapes, 256 features (twenty-eighth session), and 128 (with
# --cosformer: the 256-feature kernels, twenty-ninth session).
SHAPES = [(4, 16, 4096, 64), (1, 16, 65536, 128), (4, 16, 4096, 256), (4, 16, 4096, 128)]
TILES = {  # (C, T, warps, stages) per feature block
    64: [(64, 64, 4, 2), (64, 64, 4, 3), (64, 64, 4, 4), (64, 64, 8, 3), (32, 64, 4, 3), (32, 64, 2, 3)],
    128: [(64, 64, 8, 2), (64, 64, 4, 2), (64, 64, 4, 3), (32, 128, 4, 3), (32, 128, 4, 4), (32, 128, 8, 3),
          (64, 128, 8, 2)],
    256: [(32, 32, 8, 2), (32, 64, 8, 2), (64, 32, 8, 2), (64, 64, 8, 2), (32, 64, 4, 2), (16, 64, 4, 2),
          (32, 128, 8, 1), (64, 64, 8, 1), (64, 128, 8, 1), (64, 128, 4, 2), (128, 64, 8, 1)],
    512: [(32, 32, 8, 1), (16, 64, 8, 1), (32, 64, 8, 1), (64, 32, 8, 1), (16, 128, 8, 1), (32, 32, 8, 2)],
}
# Tiles whose feature block is narrower than D (T < D here) hit an illegal address in Triton 3.6's
# JIT on the H200 (C64 T32): only tiles with T >= D are swept for the dq / dk kernels.
BWD_TILES = [(64, 64, 4, 2), (64, 64, 4, 3)]


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


# Cosformer's weights (--cosformer), as neuralops.core.triton_kernels.linear_attn.cosformer_weights.
WEIGHTS: tuple = (None, None)
# --seg-len: the state pass's and the forward's segments of this many rows, instead of the op's plan.
SEG_LEN: "int | None" = None


def _block(q) -> int:
    return drv.block_for("bf16", (2 if WEIGHTS[0] is not None else 1) * drv.pad16(q.shape[-1]))


def _setup(q, k, v, table: str, tile: tuple, causal: bool = True) -> drv._Setup:
    """The op's plan for these inputs with `tile` put in `table` (spec.TABLES: STATE_TILES, FWD_TILES or
    BIDIR_FWD_TILES) for bf16 at this block: the segments follow the tile, as the op's would."""
    with spec.tile_replaced(table, ("bf16", _block(q)), tile):
        return drv._Setup(q, k, v, "elu+1", causal, *WEIGHTS, SEG_LEN, None)


def _state_pass(q, k, v, tile: tuple):
    s = _setup(q, k, v, "STATE_TILES", tile)
    x = torch.empty(s.b, s.hkv, s.g * s.r, s.ep, device=q.device)
    return lambda: s.state_sums(x)


def _fwd_pass(q, k, v, tile: tuple, causal: bool = True):
    s = _setup(q, k, v, spec.fwd_table(int(causal)), tile, causal)
    states = s.forward_states(None, None)
    out = torch.empty(s.b, s.h, s.n, s.dvp, device=q.device, dtype=q.dtype)
    return lambda: s.fwd_pass(out, states, 1.0, 1e-6)


# Whole bidirectional calls through the driver (state pass, scan, forward) at 256 features, per
# forward tile and segment length (None: the op's segment_count), twenty-eighth session.
BIDIR_CALL_TILES = [(64, 64, 8, 2), (64, 128, 8, 2), (64, 128, 8, 1), (128, 64, 8, 2), (64, 128, 4, 2),
                    (128, 128, 8, 1)]
BIDIR_SEG_LENS = (None, 1024, 512)


def _bidir_call(q, k, v, tile: tuple, seg_len: int | None):
    def call() -> None:
        with spec.tile_replaced("BIDIR_FWD_TILES", ("bf16", _block(q)), tile):
            drv.forward(q, k, v, causal=False, cos=WEIGHTS[0], sin=WEIGHTS[1], seg_len=seg_len)
    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=240.0, help="stop sweeping after this many seconds")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--shapes", default="0,1", help="indices into SHAPES")
    ap.add_argument("--kinds", default="state,fwd,bwd",
                    help="of state, fwd, bidir (the bidirectional forward), bidir_call (whole calls), bwd")
    ap.add_argument("--cosformer", action="store_true", help="with Cosformer weights")
    ap.add_argument("--seg-len", type=int, help="segments of this many rows for state, fwd and bidir (default: the op's)")
    ap.add_argument("--tiles", default="", help="'C,T,warps,stages;...': the state, fwd and bidir candidates, in "
                    "this order (a tile that faults leaves the CUDA context broken for those after it)")
    args = ap.parse_args()
    global WEIGHTS, SEG_LEN
    SEG_LEN = args.seg_len
    start = time.monotonic()
    rows = []
    for b, h, n, d in [SHAPES[int(i)] for i in args.shapes.split(",")]:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        if args.cosformer:
            angle = torch.arange(n, device="cuda", dtype=torch.float64) * (math.pi / (2 * n))
            WEIGHTS = (angle.cos().float(), angle.sin().float())
        block = _block(q)
        kinds = args.kinds.split(",")
        tiles = [tuple(int(x) for x in t.split(",")) for t in args.tiles.split(";")] if args.tiles else TILES[block]
        candidates = [("state", t, _state_pass(q, k, v, t)) for t in tiles if "state" in kinds]
        candidates += [("fwd", t, _fwd_pass(q, k, v, t)) for t in tiles if "fwd" in kinds]
        candidates += [("bidir", t, _fwd_pass(q, k, v, t, False)) for t in tiles if "bidir" in kinds]
        candidates += [(f"bidir_call seg_len={s}", t, _bidir_call(q, k, v, t, s))
                       for t in BIDIR_CALL_TILES for s in BIDIR_SEG_LENS if "bidir_call" in kinds]
        for tile in BWD_TILES if "bwd" in kinds else ():
            def bwd(tile=tile):
                with spec.tile_replaced("VALUE_TILES", ("bf16", block), tile):
                    drv.backward(do, q, k, v, causal=True, cos=WEIGHTS[0], sin=WEIGHTS[1])
            candidates.append(("bwd", tile, bwd))
        for kind, tile, fn in candidates:
            if time.monotonic() - start > args.budget:
                break
            try:
                ms = bench(fn)
            except Exception as exc:  # a tile that does not compile (shared memory) or fails
                ms = float("nan")
                print(f"  {kind} {tile}: {type(exc).__name__}: {str(exc)[:120]}")
            shape = f"B{b} H{h} N{n} D{d}" + (" cosformer" if args.cosformer else "")
            rows.append(dict(shape=shape, kind=kind, tile=tile, ms=ms))
            print(f"{shape} {kind} C,T,warps,stages={tile}: {ms:.4f} ms", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("\nbest per shape and pass:")
    for key in sorted({(r["shape"], r["kind"]) for r in rows}):
        ok = [r for r in rows if (r["shape"], r["kind"]) == key and r["ms"] == r["ms"]]
        if ok:
            best = min(ok, key=lambda r: r["ms"])
            print(f"  {key[0]} {key[1]}: {best['ms']:.4f} ms with C,T,warps,stages={best['tile']}")


if __name__ == "__main__":
    main()

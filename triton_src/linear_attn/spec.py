"""The linear attention kernel specializations the build compiles (read by triton_src.aot).

Each kernel is keyed by dtype (bf16, fp16, fp32: the pointer types and the dot precision, see
PRECISION) and one block size: the padded contraction dimension that a program holds in full (all F
= parts * D features for the Dv-tiled kernels but the state pass, whose tile may take a part of
them, all of Dv for the dq/dk kernels): 64, 128 and 256 for every dtype (fp32's tf32x3 dots are
there for accuracy; see TILES and ptxas_options for its blocks). The four kernels
with a causal and a bidirectional mode also take it as a key, the state pass its forward or backward
mode (GRADS), and all five the feature map (FEAT, see FEATURES). Everything else (normalization,
GQA, states, stats, and phi under Cosformer) is a run-time argument: 5 kernels * 2 modes * 4 feature
maps * 9 (dtype, block) pairs + the decode kernel's 9 + the scan + the 16 of dq with the stats
(STATS: bf16 and fp16, see FUSED_BLOCK) and the 8 of dk with dv (WITH_DV: bf16) + the 21 of the
Gluon forward (la_fwd_wgmma: bf16, three maps; causal at blocks 64, 128 and 256, the plain forward
and the stats pass; bidirectional at 256, the plain forward) and the 14 of the Gluon backward
(la_bwd_*_wgmma; blocks 64 and 128, _wgmma_dq_built: dq with the stats for three maps and without
them for softmax_free; dk with dv for three maps), sm_90 only (WGMMA_FWD_TILES,
WGMMA_BIDIR_FWD_TILES, WGMMA_BWD_TILES) + the 14 of Cosformer's 512 block (COSFORMER_BLOCK, bf16
and fp16: the state pass, the forward and dv in two modes, which walk one part per launch
(walks_by_part), and the decode kernel) = 443 variants. The bf16 tiles of blocks 64 and
128 come from the H200 sweeps (benchmarks/tune_linear_attn.py: C 64, T 64; at 128 features the state
pass and the forward have their own, STATE_TILES and FWD_TILES, and the bidirectional forward
BIDIR_FWD_TILES) and the spill counts of the 3.8 cubins (benchmarks/cubin_stats.py: 8 warps at 128
features), dq's and dk's at 128 from a sweep of AOT builds (benchmarks/aot_with_tile.py, see
VALUE_TILES); the others keep the running state at most 32 KB of registers per program and shared
memory under 99 KB (the opt-in limit of sm_86, sm_89 and sm_120, which also run the sm_80 cubins).
The build enforces that limit (triton_src/aot/compiler.py compile_tasks): the causal dv kernel at
(bf16, 128) and (fp16, 256), which needs 104-130 KB with its two stages, is built with one for sm_80
and sm_120. Where sm_90's 227 KB allow faster tiles, it compiles its own (ARCH_TILES; the tile of a
(dtype, block) may also differ per feature map), and the op reads the tiles of the cubin that runs
on its device.

Pointers to q, k, v and the gradients, their batch, head and row strides, and D and Dv carry
16-divisibility hints in every variant: csrc/ops/linear_attn.cpp guarantees them, so there is no
unhinted variant.
"""

import contextlib
from collections.abc import Iterator

from triton_src.aot.spec import KernelSpec
from triton_src.linear_attn.kernels import PHI_KINDS

# (dtype, block) -> (chunk rows C, tile of the other dimension, warps, stages), for the Dv-tiled
# kernels (block: all features) and the dq/dk kernels (block: all of Dv).
# bf16 at 256 (the dv pass's tile; the others have their own below, twenty-eighth session): these
# tables serve every architecture, so a tile must also fit sm_80's and sm_120's 99 KB with one
# stage. (64, 32, 8, 2) uses wgmma and does not spill: dv at B4 H16 N4096 D256 2662 -> 1764 us on the
# H200 against (32, 32, 8, 2); (64, 64, 8, 2) took 1089 us there but needs 104 KB on sm_80, so sm_90
# alone takes it (ARCH_TILES).
TILES = {
    ("bf16", 64): (64, 64, 4, 3),
    ("bf16", 128): (64, 64, 8, 2),
    ("bf16", 256): (64, 32, 8, 2),
    ("fp16", 64): (64, 64, 4, 2),
    ("fp16", 128): (32, 64, 8, 2),
    ("fp16", 256): (32, 32, 8, 2),
    # fp32 builds its own 64 and 128 blocks, so that calls of up to 128 features and value columns
    # stay off the 256 block's causal dq and dk (see ptxas_options). In these tiles every fp32
    # variant keeps at most 264 bytes of stack (sm_90); H100, causal fwd+bwd B4 H16 N4096 D64
    # 120.4 -> 2.09 ms, N2048 D128 115.5 -> 7.53 ms against the 256 block (forty-fifth session).
    ("fp32", 64): (16, 64, 4, 1),
    ("fp32", 128): (16, 32, 8, 1),
    ("fp32", 256): (16, 16, 4, 1),
    # Cosformer above 128 features (COSFORMER_BLOCK), the dv pass's: its walk holds one part's 256
    # features (walks_by_part), so the 256 block's tiles.
    ("bf16", 512): (64, 32, 8, 2),
    ("fp16", 512): (32, 32, 8, 2),
}
# The state pass and the forward hold all of Dv in one program at 128 features in bf16 (features
# computed once per row, not once per Dv tile). H200 sweep at B1 H16 N65536 D128 (Triton JIT, each
# kernel alone): the state pass 594 us with the shared tile, 327 us with (32, 128, 4, 3); the
# forward 2.12 ms against 1.61 ms with (32, 128, 8, 3). Both stay under 99 KB of shared memory.
# At 256 the state pass in (32, 64, 4, 2) (H200 JIT sweep at B4 H16 N4096 D256: 0.468 ms with the
# shared (32, 32, 8, 2), 0.245 ms; (32, 128, 8, 1), 0.242 ms, needs 128 KB on sm_80), which spills 40
# bytes in its backward mode: AOT, 263 -> 136 us forward and 457 -> 160 us backward. The causal
# forward keeps (32, 32, 8, 2): Cosformer's 128 features (FEAT 0) and fp16 run it, and its Dv tile is
# the Gluon walk's (WGMMA_FWD_TILES). sm_90 has its own for both (ARCH_TILES).
# At 512 (Cosformer, D 256; thirty-seventh session, H100 JIT sweep at B4 H16 N4096 D256, each kernel
# alone, benchmarks/tune_linear_attn.py --cosformer --shapes 2): the state pass 1.55 ms with the shared
# (32, 32, 8, 1), 0.76 ms with (16, 64, 8, 1); the causal forward 30.9 ms, 6.44 ms with (16, 32, 8, 2)
# (9.15 with one stage; every other tile 10-39 ms: the [512, BT] state and z's [512, 16] tile leave
# little room). So the forward and dv walk one part at a time there (walks_by_part), in tiles of 256
# features (below).
# A fifth element is the state pass's feature tile (state_feature_tile; none: the whole block): the
# sums contract over rows, so a [128, 128] tile of a wider S needs nothing from the other programs
# and holds 64 registers of it per thread with 4 warps, where all features took [512, 64] at 8
# warps and C 16 (thirty-eighth session, H100 JIT sweep at B4 H16 N4096 D256 Cosformer, the op's
# causal segments / one segment): (16, 64, 8, 1) 0.767 / 0.758 ms, (32, 128, 4, 4, 128) 0.360 /
# 0.347 ms; (64, 128, 4, 3, 128) 0.363 / 0.348, 256-feature tiles 0.47-0.81. 64 KB: it fits sm_80.
# fp16 at 512 takes its 256 block's tile on each half of the features (its tf32 operands hold twice
# bf16's registers; not swept).
STATE_TILES = {**TILES, ("bf16", 128): (32, 128, 4, 3), ("bf16", 256): (32, 64, 4, 2),
               ("bf16", 512): (32, 128, 4, 4, 128), ("fp16", 512): (*TILES["fp16", 256], 256)}
# The forward at 512 walks one part (walks_by_part): bf16 takes Cosformer D128's tile (256 features,
# FEAT 0), fp16 (16, 32, 8, 2), whose sm_90 cubin has 128 bytes of stack where (32, 32, 8, 2) had
# 2400.
FWD_TILES = {**TILES, ("bf16", 128): (32, 128, 8, 3), ("bf16", 256): (32, 32, 8, 2), ("bf16", 512): (32, 32, 8, 2),
             ("fp16", 512): (16, 32, 8, 2)}
# The bidirectional forward (CAUSAL = 0) keeps only the fixed state's bf16 operand for its loop.
# While that was a hi + lo pair, all of Dv in one program at 128 features held 64 KB of it in
# registers (3.8x the memory floor at B4 H16 N4096) and Dv tiles of 64 won. With one bf16 rounding
# (kernels.py, Precision) all of Dv fits, and q is read and its features computed once per row:
# H200 JIT sweep, B4 H16 N4096 D128 0.119 -> 0.100 ms, B1 H16 N65536 D128 0.401 -> 0.328 ms (with
# segment_count's two programs per SM; results/linear_attn.md, tenth session). At 256 (JIT sweep, B4
# H16 N4096 D256): 0.958 ms with (32, 32, 8, 2), 0.284 ms with (64, 64, 8, 2), no spill; sm_90 has
# its own (ARCH_TILES). At 512 all features in one program took 1.67 ms in (32, 32, 8, 1) (the sweep
# above; (16, 64, 8, 1) 1.99 ms, and on sm_90 (32, 128, 8, 1), 176 KB, 0.955 ms); it walks one part
# at a time instead (walks_by_part), in the tiles of 256 features.
BIDIR_FWD_TILES = {**FWD_TILES, ("bf16", 128): (64, 128, 4, 3), ("bf16", 256): (64, 64, 8, 2),
                   ("bf16", 512): (64, 64, 8, 2), ("fp16", 512): (32, 32, 8, 2)}


# The causal forward walk in Gluon (fwd_wgmma.py, sm_90 only) where it is built: bf16, one feature
# part. (C, warps, cp.async stages): 64-row chunks, whose every product is a wgmma. H200 sweep of the reduced walk (benchmarks/linear_attn_wgmma_sweep.py,
# eighteenth session): 4 warps at 64 features (8: 68.8 against 52.3 us at B4 H16 N4096), 8 at 128
# (4 spill 448 bytes: 972.8 against 531.7 us at B1 H16 N65536); 3 stages within -4% to +1% of 2.
# At 256 features (twenty-eighth session) the Dv tile is la_fwd_kernel's 32 (FWD_TILES): two stages
# of 64 x 256 q and k tiles and their features take 192 KB, and with Dv tiles of 64 the block would
# need 240 KB; no spill with 8 warps. The stats variant's grad_out ring takes it over sm_90's 232448
# bytes with two stages (233472), so the build gives it one (KernelSpec.stages_constexpr). H200, B4
# H16 N4096 D256: the walk 2619 -> 1179 us against la_fwd_kernel's, the stats pass 2817 -> 1327 us.
WGMMA_FWD_TILES = {("bf16", 64): (64, 4, 2), ("bf16", 128): (64, 8, 2), ("bf16", 256): (64, 8, 2)}
# The bidirectional walk in Gluon (fwd_wgmma.py _fixed_state_walk), same form, at 256 features alone:
# la_fwd_kernel there holds one program per multiprocessor and waits for each dot (latency-bound),
# where at 64 and 128 it is within 2x of the memory floor. Its Dv tile is la_fwd_kernel's
# bidirectional one, on sm_90 all of Dv (ARCH_TILES): q is read and its features computed once per
# chunk; the state's bf16 copy (128 KB), two stages of q (64 KB) and qf (32 KB) take 224 KB, in 255
# registers and 8 bytes of stack. With the state pass of all rows (csrc whole_state_pass), AOT A/B
# on an H100 (forty-second session, two rounds), B4 H16 N4096 D256: the call 0.3475 -> 0.3209 ms
# (walk 208 -> 174 us), fwd+bwd 2.856 -> 2.737 ms. The Dv-128 tile lost (0.350 -> 0.365 ms).
WGMMA_BIDIR_FWD_TILES = {("bf16", 256): (64, 8, 2)}
# The backward's walks in Gluon (bwd_wgmma.py, sm_90 only): dq, and dk with dv in one walk (no dv
# pass, as the Triton kernels' FUSED_BLOCK), for bf16 with one feature part, all features and value
# columns in one program (C, warps, cp.async stages), where the Triton kernels at 128 tile F by 32
# (dq, dk) or Dv by 64 (dv). 4 warps at 64: two programs per SM, the one wave that a grid of
# 1024-row segments at B4 H16 N4096 asks for. dk with dv takes 255 registers with 16-24 bytes of
# stack at both blocks, and at 128 writes kf over k's tile to fit 213 KB of shared memory (with a kf
# buffer of its own it needed 229 KB).
WGMMA_BWD_TILES = {("bf16", 64): (64, 4, 2), ("bf16", 128): (64, 8, 2)}
WGMMA_ARCHS = (90,)


def state_feature_tile(tile: tuple, block: int) -> int:
    """The state pass's feature tile (la_state_kernel BF): a STATE_TILES tile's fifth element, where
    it has one, else the whole block."""
    return tile[4] if len(tile) > 4 else block


def fwd_table(causal: int) -> str:
    return "FWD_TILES" if causal else "BIDIR_FWD_TILES"


# 16 rows at 256 for shared memory. (dq and dk spill less with 8 warps at 64, but measured slower on
# the H200: fwd+bwd B4 H16 N4096 D64 1.04 against 0.83 ms with 4.)
# At 64 features 2 stages: with its chunk loop pipelined, dk spilled 56 bytes with 3 (none with 2).
# At 256 one stage: with 2, ptxas left dk 32 registers and 2-3 KB of stack (bf16: 255 registers and
# 704 bytes with one stage; fp16, tf32 operands, needs 8 warps too: 248 bytes, dq 80). fp32's dq and
# dk still get 32 registers and 4-7 KB of stack (fp32 is there for accuracy).
# At 128 in bf16, feature tiles of 32 with 4 warps: the first sweep there (AOT builds, since the JIT
# faults on these tiles; H200, causal fwd+bwd, whole call) measured B1 H16 N65536 D128 6.61 -> 6.33 ms
# and B4 H16 N4096 D128 2.00 -> 1.92 ms against the shared (64, 64, 8, 2); (64, 64, 8, 3) gave 6.35 and
# 1.95 ms, (32, 64, 8, 2) 8.22 and 2.38 ms. dk spills 64 bytes with it, and is still faster.
# At 256 in bf16 (twenty-eighth session, AOT builds, H200, B4 H16 N4096 D256): 8 warps and feature
# tiles of 64 took dk 4278 -> 2081 us (spill 720 -> 88 bytes) and dq 1910 -> 2009 us against
# (16, 32, 4, 1); (16, 128, 8, 1) spilled 0.7-1 KB and took dq 3629 us.
VALUE_TILES = {**TILES, ("bf16", 64): (64, 64, 4, 2), ("bf16", 128): (64, 32, 4, 2), ("bf16", 256): (16, 64, 8, 1),
               ("fp16", 256): (16, 32, 8, 1)}
BLOCKS = {"bf16": (64, 128, 256), "fp16": (64, 128, 256), "fp32": (64, 128, 256)}
# Cosformer doubles the features (F = 2 D): at D > 128 they take a block of 512, which only the
# kernels whose block holds all F features (BK: the Dv-tiled ones and the decode kernel) build, and
# only for the run-time map (FEAT 0), the one Cosformer runs; dq's and dk's block holds Dv (<= 256).
# bf16 and fp16 build it: the forward and dv walk one part at a time (walks_by_part), which fits
# sm_80's 99 KB of shared memory where all 512 features of fp16's tf32 operands did not (128 KB at
# the smallest tiles, thirty-seventh session), and the state pass sums slices of the features
# (STATE_TILES' fifth element). fp32 does not: built (forty-third session) its kernels lost to the
# fallback (forty-fourth, H100, B4 H16 N4096 D256: causal forward 93.7 against 16.4 ms,
# fwd+bwd 1013 against 153 ms, of which dq 404 and dk 370 ms), where fp16's won
# (11.5 against 17.2 ms, 50.2 against 154.6 ms). neuralops/core/triton_kernels/linear_attn.py
# COSFORMER_WIDE_DTYPES holds the same (a CPU test checks).
COSFORMER_BLOCK = 512
COSFORMER_BLOCK_DTYPES = ("bf16", "fp16")


def walks_by_part(block: int) -> bool:
    """Whether la_fwd_kernel and la_bwd_dv_kernel walk the block's two Cosformer parts in two
    launches (SPLIT), part 1 adding part 0's sums: at 512 features a program that held all of them
    ran small tiles and spilled (B4 H16 N4096 D256 on an H100, thirty-seventh session: causal
    forward 5.95 ms in its best tile, dv 7.30 ms), where each part is the walk of Cosformer at D 128
    (256 features, FEAT 0)."""
    return block == COSFORMER_BLOCK


SPLIT_KERNELS = ("la_fwd", "la_bwd_dv")


def feature_blocks(dtype: str, feat: int) -> tuple[int, ...]:
    """The blocks of all F features built for `dtype` tensors and the feature key FEAT."""
    wide = feat == 0 and dtype in COSFORMER_BLOCK_DTYPES
    return (*BLOCKS[dtype], COSFORMER_BLOCK) if wide else BLOCKS[dtype]


TABLES = {"TILES": TILES, "STATE_TILES": STATE_TILES, "FWD_TILES": FWD_TILES, "BIDIR_FWD_TILES": BIDIR_FWD_TILES,
          "VALUE_TILES": VALUE_TILES}
# Tiles that replace the tables' on one architecture: arch -> table -> {key: tile}, where a key is
# (dtype, block) or (dtype, block, FEAT), the latter first. The tables above are for every
# architecture, so their tiles fit sm_80's and sm_120's 99 KB (sm_80's cubins also run on sm_86 and
# sm_89); sm_90 allows 227 KB a block. The plan reads the tiles of the cubin that runs on its device
# (<kernel>_constexprs(key, device)). Overrides must not change which variants are built (VALUE_TILES
# at FUSED_BLOCK decides that for every architecture). The H200's, at 256 features (twenty-ninth
# session, AOT builds against the shared tiles, B4 H16 N4096, whole calls):
# - dv (64, 64, 8, 2), 104 KB on sm_80: 1755 -> 1082 us; D256 fwd+bwd 8.69 -> 8.02 ms.
# - the state pass (64, 128, 8, 1) (JIT sweep: 0.218 against 0.245 ms): forward states at D256 134 ->
#   113 us, bidirectional 264 -> 209 us; the backward's reverse states 159 -> 176 us.
# - the bidirectional forward (128, 128, 8, 1), 139 KB: 293 -> 199 us; the D256 call 0.595 -> 0.441 ms.
#   Cosformer's variant (FEAT 0, at D128 F = 256 and Dv = 128) keeps the shared tile: its call took
#   0.415 ms with this one and 0.400 with (64, 128, 4, 2), against 0.390.
# - Cosformer's causal forward (FEAT 0; the other maps run the Gluon walk, whose Dv tile is the
#   shared one's) (32, 64, 8, 2) (JIT sweep: 1.05 against 1.41 ms; (64, 64, 8, 2) faulted in the
#   JIT): 1419 -> 862 us; Cosformer D128 causal fwd 1.58 -> 1.06 ms, fwd+bwd 5.49 -> 4.04 ms. Then
#   (16, 128, 8, 1), one Dv tile of 128 (thirty-second session, AOT A/B): 861 -> 820 us, causal fwd
#   1.056 -> 1.009 ms, fwd+bwd 4.034 -> 4.017 ms (its stats pass, same tile, 877 -> 900 us).
# - Then (thirty-fifth session's JIT sweeps on an H100, thirty-sixth's AOT A/B on the H200, two
#   rounds): the state pass (16, 128, 8, 4), the bidirectional forward (64, 128, 8, 3) and
#   Cosformer's (64, 128, 8, 2): D256 bidirectional 0.400 -> 0.375 ms, causal fwd+bwd 8.00 -> 7.92
#   ms; Cosformer D128 bidirectional 0.358 -> 0.264 ms, causal fwd 1.016 -> 0.959 ms. The state pass
#   (32, 128, 8, 3) with the other bidirectional tile (128, 128, 8, 1) measured in between (0.382,
#   0.273 ms).
# - Cosformer's bidirectional forward at 512 features (thirty-seventh session, H100 JIT sweep at B4
#   H16 N4096 D256) (32, 128, 8, 1), 176 KB: 1.67 -> 0.955 ms; (16, 128, 8, 1) 1.14 ms. (Since
#   replaced by the walk of one part at a time, walks_by_part.)
# - The state pass in 128-feature tiles (STATE_TILES' fifth element; thirty-eighth session, H100 JIT
#   sweep, B4 H16 N4096, the op's causal segments / one segment): D256 (64, 128, 4, 3, 128) 0.132 /
#   0.131 ms against (16, 128, 8, 4)'s 0.178 / 0.154 (96 KB with 3 stages: sm_90 only). AOT A/B on
#   the H100: the D256 bidirectional call 0.371 -> 0.349 ms (state 157 -> 132 us). Cosformer D128
#   (FEAT 0) keeps (16, 128, 8, 4): with (64, 128, 8, 3, 128) (JIT 0.114 / 0.103 ms against 0.121 /
#   0.218) its bidirectional call, two segments and a scan, went 0.263 -> 0.278 ms (state 110 -> 125
#   us), its causal forward 0.977 -> 0.962 ms.
ARCH_TILES = {
    90: {"TILES": {("bf16", 256): (64, 64, 8, 2), ("bf16", 512, 0): (64, 64, 8, 2)},
         "STATE_TILES": {("bf16", 256): (64, 128, 4, 3, 128), ("bf16", 256, 0): (16, 128, 8, 4)},
         "FWD_TILES": {("bf16", 256, 0): (16, 128, 8, 1), ("bf16", 512, 0): (16, 128, 8, 1)},
         "BIDIR_FWD_TILES": {("bf16", 256): (64, 256, 8, 1), ("bf16", 256, 0): (64, 128, 8, 2),
                             ("bf16", 512, 0): (64, 128, 8, 2)}},
}


def _arch_tiles(table: str, arch: int | None) -> dict:
    """TABLES[table] as compiled for sm_`arch` (None, or an arch without its own: the shared tiles)."""
    return {**TABLES[table], **ARCH_TILES.get(arch, {}).get(table, {})}


def tile_of(table: str, arch: int | None, dtype: str, block: int, feat: int) -> tuple:
    """(C, tile, warps, stages) in `table` for sm_`arch`, a dtype, block and feature key (FEAT)."""
    tiles = _arch_tiles(table, arch)
    return tiles.get((dtype, block, feat), tiles[dtype, block])


def _tables_named(table: str) -> list[dict]:
    """`table`'s shared tiles and every architecture's overrides of it."""
    return [TABLES[table], *(arch[table] for arch in ARCH_TILES.values() if table in arch)]


def replace_tile(table: str, key: tuple, tile: tuple) -> None:
    """`tile` for `key`, (dtype, block) or (dtype, block, FEAT), in `table` on every architecture and
    under every feature key it covers (for the tuning tools)."""
    TABLES[table][key] = tile
    for tiles in _tables_named(table):
        for k in tiles:
            if k[:len(key)] == key:
                tiles[k] = tile


@contextlib.contextmanager
def tile_replaced(table: str, key: tuple, tile: tuple) -> Iterator[None]:
    """replace_tile for the duration of the block; the tables are as they were after it."""
    tables = _tables_named(table)
    saved = [dict(t) for t in tables]
    replace_tile(table, key, tile)
    try:
        yield
    finally:
        for t, old in zip(tables, saved):
            t.clear()
            t.update(old)


# Triton 3.8 cannot software-pipeline dv's and dk's loop for sm_100 (its pipeliner fails on the
# dot under `if` that starts each chunk): one stage there.
MAX_STAGES = {"la_bwd_dv": {100: 1}, "la_bwd_dk": {100: 1}}
# The feature map compiled in (constexpr FEAT): 1 + phi_kind (kernels.PHI_KINDS) with one part, or 0,
# the variant that reads phi_kind and n_parts at run time (Cosformer). Triton's JIT, which compiles
# integer arguments equal to 1 in, showed what run-time switches cost (H200, bf16): against
# signatures without that specialization, the bidirectional forward at B1 H16 N65536 D128 ran
# 0.695 against 0.457 ms, B4 H16 N4096 D128 0.212 against 0.154 ms, and the causal forward at
# B4 H16 N4096 D64 0.111 against 0.098 ms; phi and the part count carried most of it (offline
# sm_90 loop at 128 features: 1257 SASS instructions, 1030 with them compiled in).
FEATURES = (0, *(kind + 1 for kind in PHI_KINDS.values()))


def feature_key(phi_kind: int, n_parts: int) -> int:
    """FEAT for a call (csrc/ops/linear_attn.cpp feature_key)."""
    return phi_kind + 1 if n_parts == 1 else 0


# Dot operands: bf16 tensors use bf16 (the tensor cores' full rate; within the bf16 tolerance),
# fp16 tensors tf32 (fp16 operands would overflow: S and z grow with N), fp32 tensors tf32x3.
PRECISION = {"bf16": 1, "fp16": 2, "fp32": 3}

# Scan tile: GB segments x BE state elements per step. Segments are few (segment_count in
# csrc/ops/linear_attn.cpp: 2-4 at B4 H16 N2048-4096), and a [16, 256] tile held 128 registers, 4
# programs per SM, for rows mostly masked: with 4 rows (48 registers) the scan at B4 H16 N2048 D128
# took 10.1 against 21.0 us (ncu), and 17.6 against 17.5 us at B1 H16 N65536 D128 (32 segments).
# (2, 512) gave 7.0 and 19.0 us, (4, 512) 8.8 and 22.0 us.
SCAN_CONSTEXPRS = {"BE": 256, "GB": 4}

_STRIDE_PREFIX = {"q": "sq", "k": "sk", "v": "sv", "o": "so", "do": "sd", "dq": "sdq", "dk": "sdk", "dv": "sdv"}
_F32 = "*fp32"
_I = "i32"
_W = (("wc_ptr", _F32), ("ws_ptr", _F32))
# D and Dv as the kernels see them (16-divisible, maybe padded), then the true ones (state layout).
_DIMS = (("D", "i32:16"), ("DV", "i32:16"), ("DS", _I), ("DVS", _I))


def _strides(*names: str) -> tuple:
    """Batch, head and row strides of each tensor, all 16-divisible."""
    return tuple((f"{_STRIDE_PREFIX[n]}_{dim}", "i64:16") for n in names for dim in "bhn")


def _ptrs(ptr: str, *names: str) -> tuple:
    return tuple((f"{n}_ptr", ptr) for n in names)


def _state_params(ptr: str) -> tuple:
    return (*_ptrs(ptr, "k", "v"), *_W, *_ptrs(_F32, "x", "den", "dl"),
            ("HKV", _I), ("N", _I), *_DIMS, ("G", _I), ("L", _I), ("g_first", _I), ("n_walk", _I),
            ("phi_kind", _I), ("n_parts", _I), ("normalize", _I), ("scale", "fp32"),
            *_strides("k", "v"), ("sw_b", "i64"), ("EP", "i64"))


def _fwd_params(ptr: str) -> tuple:
    return (*_ptrs(ptr, "q", "k", "v", "o"), *_W,
            *_ptrs(_F32, "s", "z", "sf", "zf", "den", "dl", "acc", "accd"),
            ("H", _I), ("HKV", _I), ("N", _I), *_DIMS, ("G", _I), ("L", _I),
            ("phi_kind", _I), ("normalize", _I), ("n_parts", _I), ("has_s", _I),
            ("write_final", _I), ("stats", _I), ("part", _I), ("scale", "fp32"), ("eps", "fp32"),
            *_strides("q", "k", "v", "o"),
            ("sw_b", "i64"), ("ss_bh", "i64"), ("ss_g", "i64"), ("sz_bh", "i64"), ("sz_g", "i64"))


def _dq_params(ptr: str) -> tuple:
    return (*_ptrs(ptr, "q", "k", "v", "do", "dq"), *_W,
            *_ptrs(_F32, "s", "z", "den", "dl"),
            ("H", _I), ("HKV", _I), ("N", _I), *_DIMS, ("G", _I), ("L", _I),
            ("phi_kind", _I), ("normalize", _I), ("n_parts", _I), ("has_s", _I), ("scale", "fp32"),
            ("eps", "fp32"), *_strides("q", "k", "v", "do", "dq"),
            ("sw_b", "i64"), ("ss_bh", "i64"), ("ss_g", "i64"), ("sz_bh", "i64"), ("sz_g", "i64"))


def _dv_params(ptr: str) -> tuple:
    return (*_ptrs(ptr, "q", "k", "do", "dv"), *_W, *_ptrs(_F32, "r", "den", "acc"),
            ("H", _I), ("HKV", _I), ("N", _I), *_DIMS, ("G", _I), ("L", _I),
            ("phi_kind", _I), ("normalize", _I), ("n_parts", _I), ("has_r", _I), ("part", _I),
            ("scale", "fp32"),
            *_strides("q", "k", "do", "dv"),
            ("sw_b", "i64"), ("sr_bh", "i64"), ("sr_g", "i64"))


def _dk_params(ptr: str) -> tuple:
    return (*_ptrs(ptr, "q", "k", "v", "do", "dk", "dv"), *_W, *_ptrs(_F32, "r", "rz", "den", "dl"),
            ("H", _I), ("HKV", _I), ("N", _I), *_DIMS, ("G", _I), ("L", _I),
            ("phi_kind", _I), ("normalize", _I), ("n_parts", _I), ("has_r", _I),
            ("scale", "fp32"),
            *_strides("q", "k", "v", "do", "dk", "dv"),
            ("sw_b", "i64"), ("sr_bh", "i64"), ("sr_g", "i64"), ("srz_bh", "i64"), ("srz_g", "i64"))


def _decode_params(ptr: str) -> tuple:
    return (*_ptrs(ptr, "q", "k", "v", "o"), *_W, *_ptrs(_F32, "s", "z", "sf", "zf"),
            ("H", _I), ("HKV", _I), ("N", _I), *_DIMS,
            ("phi_kind", _I), ("normalize", _I), ("n_parts", _I), ("has_s", _I), ("write_final", _I),
            ("scale", "fp32"), ("eps", "fp32"), *_strides("q", "k", "v", "o"),
            ("sw_b", "i64"), ("ss_bh", "i64"), ("sz_bh", "i64"))


# The decode kernel holds a [BK, BT] fp32 state tile with 4 warps: 64 registers per thread at most.
DECODE_BT = {64: 64, 128: 64, 256: 32, 512: 16}
DECODE_WARPS = 4

_SCAN_PARAMS = (
    *_ptrs(_F32, "x", "y", "init_s", "init_z", "tot_s", "tot_z"),
    ("G", _I), ("FD", _I), ("E", _I), ("n_grp", _I), ("mode", _I), ("has_init", _I), ("has_total", _I),
    ("n_far", _I), ("write_y", _I), ("EP", "i64"), ("sy_bh", "i64"),
)

# kernel -> (parameters, name of the block key, name of the other tile's constexpr, the name of its
# table in TABLES for a key (the forward's depends on its mode), the mode
# compiled in rather than a run-time branch: CAUSAL freed enough registers to cut the 3.8 forward's
# spills at 128 features from 472 to 152 bytes per thread with 8 warps; GRADS keeps the backward's
# row weights out of the forward's state pass: 104 against 138 registers, 555 against 710 SASS
# instructions per chunk at 64 features)
_KERNELS = {
    "la_state": (_state_params, "BK", "BT", lambda key: "STATE_TILES", "GRADS"),
    "la_fwd": (_fwd_params, "BK", "BT", lambda key: fwd_table(key["CAUSAL"]), "CAUSAL"),
    "la_bwd_dq": (_dq_params, "BKV", "BF", lambda key: "VALUE_TILES", "CAUSAL"),
    "la_bwd_dv": (_dv_params, "BK", "BT", lambda key: "TILES", "CAUSAL"),
    "la_bwd_dk": (_dk_params, "BKV", "BF", lambda key: "VALUE_TILES", "CAUSAL"),
}


# Fused backward variants: dq with the stats pass folded in (la_bwd_dq_kernel STATS) and dk that
# computes dv too (la_bwd_dk_kernel WITH_DV), each reading q, k, v and grad_out once where two
# passes read them twice. Only where their program holds all of F: 64 features in bf16, so calls
# with D <= 64 (csrc/ops/linear_attn.cpp bwd_cuda). H200, causal fwd+bwd B4 H16 N4096 D64 (the
# stats pass 72.9 + dq 79.7 us -> 126.9 us, dv 62.5 + dk 85.3 us -> 125.5 us): bf16 0.442 ->
# 0.399 ms, softmax_free 0.319 -> 0.304 ms, D32 relu 0.391 -> 0.341 ms; both spill (48-264 bytes)
# and are still faster. fp16, whose tf32 operands take twice the registers, spilled 600-760 bytes
# and went 0.764 -> 0.811 ms: not built then. Since dq takes dout . out from its own products
# (twenty-third session: one product where the forward's outputs took three) its fp16 variant
# spills 360 bytes at sm_90 (512 before; 504 against 768 at sm_80), and fp16 builds dq's STATS
# (STATS_DTYPES); dk's WITH_DV stays bf16 only.
FUSED_BLOCK = 64
STATS_DTYPES = ("bf16", "fp16")


def _holds_all_features(key: dict) -> bool:
    return key["BKV"] == FUSED_BLOCK and VALUE_TILES[key["dtype"], FUSED_BLOCK][1] == FUSED_BLOCK


def dk_dv_built(key: dict) -> bool:
    """dk computes dv (la_bwd_dk_kernel WITH_DV)."""
    return key["dtype"] == "bf16" and _holds_all_features(key)


def dq_stats_built(key: dict) -> bool:
    """dq computes the stats (la_bwd_dq_kernel STATS)."""
    return key["dtype"] in STATS_DTYPES and _holds_all_features(key)


# ptxas -O3 (and -O2) gives fp32's causal dq and dk at the 256 block 32 registers and 4-7 KB of
# stack on every architecture and in every tile tried (C 16-32, BF 16-32, 2-8 warps): its register
# allocator's fallback, not a tile that needs few registers. -O1 allocates 255 registers with 1.7 KB
# of stack (sm_90 dq). Only these variants take it; others compile at -O3.
def ptxas_options(name: str, key: dict) -> str:
    """Extra ptxas flags for one variant (KernelSpec.ptxas_options)."""
    fallback = (name in ("la_bwd_dq", "la_bwd_dk") and key["dtype"] == "fp32" and key["BKV"] == 256
                and key["CAUSAL"] == 1)
    return "-O1" if fallback else ""


# Keys beyond (dtype, block, mode, FEAT), with the rule for which of their variants are built.
_EXTRA_KEYS = {"la_bwd_dq": ({"STATS": (0, 1)}, lambda key: key["STATS"] == 0 or dq_stats_built(key)),
               "la_bwd_dk": ({"WITH_DV": (0, 1)}, lambda key: key["WITH_DV"] == 0 or dk_dv_built(key))}


def _spec(name: str) -> KernelSpec:
    params, block, other, table, mode = _KERNELS[name]
    extra, extra_built = _EXTRA_KEYS.get(name, ({}, lambda key: True))

    def tile(key: dict) -> tuple:
        return tile_of(table(key), key["arch"], key["dtype"], key[block], key["FEAT"])

    def constexprs(key: dict) -> dict:
        c, t = tile(key)[:2]
        feature_tile = {"BF": state_feature_tile(tile(key), key[block])} if name == "la_state" else {}
        split = {"SPLIT": int(walks_by_part(key[block]))} if name in SPLIT_KERNELS else {}
        return {"C": c, block: key[block], **feature_tile, other: t, "PREC": PRECISION[key["dtype"]],
                mode: key[mode], "FEAT": key["FEAT"], **split, **{k: key[k] for k in extra}}

    def built(key: dict) -> bool:
        blocks = feature_blocks(key["dtype"], key["FEAT"]) if block == "BK" else BLOCKS[key["dtype"]]
        return key[block] in blocks and extra_built(key)

    blocks = sorted({b for dtype in BLOCKS for b in feature_blocks(dtype, 0)})
    keys = {"dtype": tuple(BLOCKS), block: tuple(blocks), mode: (0, 1), "FEAT": FEATURES, **extra}
    return KernelSpec(name=name, function=f"{name}_kernel", params=params("*{dtype}:16"), keys=keys,
                      constexprs=constexprs,
                      num_warps=lambda key: tile(key)[2], num_stages=lambda key: tile(key)[3],
                      max_stages=MAX_STAGES.get(name, {}),
                      include=built, ptxas_options=lambda key: ptxas_options(name, key))


def _wgmma_spec(name: str, source: str, params, tiles: dict, block: str, extra_keys: dict, constexprs,
                extra_built=lambda key: True, bidir_tiles: dict | None = None) -> KernelSpec:
    """A Gluon walk (bf16, one feature part, sm_90) with the arguments of its Triton kernel (params)
    and (C, warps, cp.async stages: STAGES, at most) from tiles[dtype, block] (causal) or
    bidir_tiles[dtype, block] (bidirectional, where given); constexprs(key) adds the rest, and
    extra_built(key) picks the extra keys' variants that are built."""
    by_mode = {1: tiles, 0: bidir_tiles or {}}
    both = {**by_mode[0], **tiles}

    def tile(key: dict) -> tuple:
        return by_mode[key["CAUSAL"]][key["dtype"], key[block]]

    def all_constexprs(key: dict) -> dict:
        return {"C": tile(key)[0], block: key[block], "PREC": PRECISION[key["dtype"]], "CAUSAL": key["CAUSAL"],
                "FEAT": key["FEAT"], **constexprs(key)}

    return KernelSpec(name=name, function=f"{name}_kernel", source=source, params=params("*{dtype}:16"),
                      keys={"dtype": tuple(sorted({d for d, _ in both})), block: tuple(sorted({b for _, b in both})),
                            "CAUSAL": (0, 1) if bidir_tiles else (1,), "FEAT": tuple(f for f in FEATURES if f > 0),
                            **extra_keys},
                      constexprs=all_constexprs, num_warps=lambda key: tile(key)[1],
                      num_stages=lambda key: tile(key)[2], stages_constexpr="STAGES",
                      include=lambda key: (key["dtype"], key[block]) in by_mode[key["CAUSAL"]] and extra_built(key),
                      archs=WGMMA_ARCHS)


def _wgmma_dq_built(key: dict) -> bool:
    """Gluon's dq computes the stats (STATS, for normalized maps: no stats pass) at every block, from
    its own products and one more, qf kf^T (bwd_wgmma.py): 255 registers and no spill at 64, 40-48
    bytes at 128 (benchmarks/cubin_stats.py). Its plain variant serves only softmax_free, whose map
    is identity's and which has no stats."""
    return key["STATS"] == 1 or key["FEAT"] == PHI_KINDS["identity"] + 1


WGMMA_KERNELS = [
    # The Dv tile is la_fwd_kernel's, since the plan sizes the forward's grid by it. The bidirectional
    # walk has no stats variant: the backward's bidirectional stats pass stays la_fwd_kernel's.
    _wgmma_spec("la_fwd_wgmma", "fwd_wgmma.py", _fwd_params, WGMMA_FWD_TILES, "BK", {"STATS": (0, 1)},
                lambda key: {"BT": tile_of(fwd_table(key["CAUSAL"]), key["arch"], key["dtype"], key["BK"],
                                           key["FEAT"])[1],
                             "STATS": key["STATS"]},
                lambda key: key["CAUSAL"] == 1 or key["STATS"] == 0, WGMMA_BIDIR_FWD_TILES),
    _wgmma_spec("la_bwd_dq_wgmma", "bwd_wgmma.py", _dq_params, WGMMA_BWD_TILES, "BKV", {"STATS": (0, 1)},
                lambda key: {"BF": key["BKV"], "STATS": key["STATS"]},
                _wgmma_dq_built),
    _wgmma_spec("la_bwd_dk_wgmma", "bwd_wgmma.py", _dk_params, WGMMA_BWD_TILES, "BKV", {},
                lambda key: {"BF": key["BKV"]}),
]


KERNELS = [
    *(_spec(name) for name in _KERNELS),
    *WGMMA_KERNELS,
    KernelSpec(name="la_decode", function="la_decode_kernel", params=_decode_params("*{dtype}:16"),
               keys={"dtype": tuple(BLOCKS), "BK": tuple(DECODE_BT)},
               constexprs=lambda key: {"BK": key["BK"], "BT": DECODE_BT[key["BK"]]},
               num_warps=DECODE_WARPS, num_stages=1,
               include=lambda key: key["BK"] in feature_blocks(key["dtype"], 0)),
    KernelSpec(name="la_scan", function="la_scan_kernel", params=_SCAN_PARAMS, keys={"dtype": ("fp32",)},
               constexprs=lambda key: SCAN_CONSTEXPRS, num_warps=4, num_stages=2),
]

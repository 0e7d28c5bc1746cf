"""The linear attention tiles per architecture (triton_src/linear_attn/spec.py ARCH_TILES): what each
arch compiles, and that an override changes tiles only, never which variants are built."""

import torch

from neuralops.core.triton_kernels import linear_attn as la
from triton_src.aot.__main__ import OPTIONAL_ARCHS, REQUIRED_ARCHS
from triton_src.linear_attn import spec

KERNELS = {s.name: s for s in spec.KERNELS}
# The Triton kernels (and the mode) that compile each table's tiles.
TABLE_KERNELS = {"TILES": [("la_bwd_dv", "BK", {})], "STATE_TILES": [("la_state", "BK", {})],
                 "FWD_TILES": [("la_fwd", "BK", {"CAUSAL": 1})], "BIDIR_FWD_TILES": [("la_fwd", "BK", {"CAUSAL": 0})],
                 "VALUE_TILES": [("la_bwd_dq", "BKV", {}), ("la_bwd_dk", "BKV", {})]}


def _compiled(v, arch: int, other: str) -> tuple:
    return v.constexprs(arch)["C"], v.constexprs(arch)[other], v.num_warps(arch), v.num_stages(arch)


def test_every_override_is_compiled_for_its_arch_alone():
    """Each ARCH_TILES entry is the tile its kernels' variants compile for that arch (a (dtype,
    block, FEAT) entry before a (dtype, block) one), and sm_80, sm_100 and sm_120 compile the shared
    table's."""
    checked = 0
    for arch, tables in spec.ARCH_TILES.items():
        for table, tiles in tables.items():
            for name, block, mode in TABLE_KERNELS[table]:
                other = "BF" if block == "BKV" else "BT"
                for v in KERNELS[name].variants():
                    k = v.key_dict
                    if (k["dtype"], k[block]) not in {t[:2] for t in tiles} or any(k[m] != x for m, x in mode.items()):
                        continue
                    want = tiles.get((k["dtype"], k[block], k["FEAT"]), tiles.get((k["dtype"], k[block])))
                    shared = spec.TABLES[table][k["dtype"], k[block]]
                    if want is None:  # only feature-key entries for this block, none for this FEAT
                        want = shared
                    assert _compiled(v, arch, other)[:3] == want[:3], (v.name, arch)
                    assert v.num_stages(arch) == want[3]
                    if name == "la_state":  # and the feature tile, the block where the tile has none
                        assert v.constexprs(arch)["BF"] == spec.state_feature_tile(want, k["BK"]), (v.name, arch)
                    for other_arch in {80, 90, 100, 120} - {arch}:
                        assert _compiled(v, other_arch, other)[:3] == shared[:3], (v.name, other_arch)
                    checked += 1
    assert checked >= 16


def test_the_sm90_tiles_measured_on_hoppers():
    """On sm_90 the state pass (in 128-feature tiles but for Cosformer's) and the bidirectional forward
    take their own tiles at 256 (Cosformer's
    bidirectional forward, FEAT 0, its own too), and so does Cosformer's causal forward; the other
    maps keep the causal one (the Gluon walk's Dv tile)."""
    for table, feat, tile in (("TILES", 2, (64, 64, 8, 2)), ("TILES", 0, (64, 64, 8, 2)),
                              ("STATE_TILES", 2, (64, 128, 4, 3, 128)), ("STATE_TILES", 0, (16, 128, 8, 4)),
                              ("BIDIR_FWD_TILES", 3, (64, 256, 8, 1)), ("BIDIR_FWD_TILES", 0, (64, 128, 8, 2)),
                              ("FWD_TILES", 0, (16, 128, 8, 1)), ("FWD_TILES", 2, spec.FWD_TILES["bf16", 256])):
        assert spec.tile_of(table, 90, "bf16", 256, feat) == tile, (table, feat)
        assert spec.tile_of(table, 80, "bf16", 256, feat) == spec.TABLES[table]["bf16", 256]


def test_the_512_block_walks_by_part():
    """At Cosformer's 512 block the forward and dv walk one part per launch (SPLIT) in each dtype
    that builds it and on every architecture, in tiles of at most 128 value columns (a [256, BT]
    fp32 state per program); every other block walks all of its features in one launch."""
    checked = 0
    for name in spec.SPLIT_KERNELS:
        for v in KERNELS[name].variants():
            for arch in (80, 90, 100, 120):
                c = v.constexprs(arch)
                assert c["SPLIT"] == (v.key_dict["BK"] == spec.COSFORMER_BLOCK), v.name
                checked += c["SPLIT"]
                assert not c["SPLIT"] or c["BT"] <= 128, (v.name, arch)
    assert checked == 2 * 2 * 4 * len(spec.COSFORMER_BLOCK_DTYPES)  # two modes, four architectures
    assert spec.SPLIT_KERNELS == ("la_fwd", "la_bwd_dv")


def test_overrides_name_existing_tables_and_keys_and_build_the_same_variants():
    for tables in spec.ARCH_TILES.values():
        for table, tiles in tables.items():
            assert {k[:2] for k in tiles} <= set(spec.TABLES[table]), table
            assert all(len(k) == 2 or k[2] in spec.FEATURES for k in tiles), table
            # VALUE_TILES at FUSED_BLOCK decides which fused variants exist, for every architecture.
            assert not (table == "VALUE_TILES" and any(k[1] == spec.FUSED_BLOCK for k in tiles))
    # The Gluon forward's Dv tile is la_fwd's of the same mode (the plan sizes its grid by it).
    fwd = {v.key: v for v in KERNELS["la_fwd"].variants()}
    for v in KERNELS["la_fwd_wgmma"].variants():
        k = v.key_dict
        twin = fwd[tuple({"dtype": k["dtype"], "BK": k["BK"], "CAUSAL": k["CAUSAL"], "FEAT": k["FEAT"]}.items())]
        assert v.constexprs(90)["BT"] == twin.constexprs(90)["BT"], v.name
    bidir = [v.key_dict for v in KERNELS["la_fwd_wgmma"].variants() if v.key_dict["CAUSAL"] == 0]
    assert {(k["dtype"], k["BK"]) for k in bidir} == set(spec.WGMMA_BIDIR_FWD_TILES)
    assert all(k["STATS"] == 0 for k in bidir)  # the bidirectional stats pass stays la_fwd_kernel's


def test_replace_tile_reaches_every_architecture_and_feature_key():
    key = ("bf16", 256)
    for table in ("STATE_TILES", "TILES"):
        before = dict(spec.TABLES[table]), dict(spec.ARCH_TILES[90][table])
        with spec.tile_replaced(table, key, (16, 16, 4, 1)):
            for feat in spec.FEATURES:
                assert spec.tile_of(table, 90, *key, feat) == spec.tile_of(table, None, *key, feat) == (16, 16, 4, 1)
        assert (spec.TABLES[table], spec.ARCH_TILES[90][table]) == before, table  # restored


def test_cosformer_wide_dtypes_are_the_builds():
    """The dtypes whose Cosformer takes D above 128 in the Python layer are those the build gives the
    512-feature block (in the kernels that hold all features, for the run-time map alone), and the
    narrow limit is the others' widest block halved."""
    names = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    assert tuple(names[d] for d in la.COSFORMER_WIDE_DTYPES) == spec.COSFORMER_BLOCK_DTYPES
    for dtype in set(names.values()) - set(spec.COSFORMER_BLOCK_DTYPES):
        assert 2 * la.MAX_NARROW_COSFORMER_HEAD_DIM == max(spec.BLOCKS[dtype])
    assert spec.COSFORMER_BLOCK == 2 * la.MAX_HEAD_DIM
    built = {(v.spec.name, v.key_dict["dtype"], v.key_dict.get("FEAT", 0)) for k in spec.KERNELS
             for v in k.variants() if v.key_dict.get("BK") == spec.COSFORMER_BLOCK}  # la_decode: no FEAT
    assert built == {(name, dtype, 0) for name in ("la_state", "la_fwd", "la_bwd_dv", "la_decode")
                     for dtype in spec.COSFORMER_BLOCK_DTYPES}


def test_ptxas_options_only_where_the_allocator_gives_up():
    """-O1 (spec.ptxas_options) for fp32's causal dq and dk at the 256 block alone, on every
    architecture the build knows: at -O3 ptxas gives them 32 registers and kilobytes of stack."""
    archs = REQUIRED_ARCHS + OPTIONAL_ARCHS
    flagged = {(v.name, arch, v.ptxas_options(arch)) for k in spec.KERNELS for v in k.variants() for arch in archs
               if v.ptxas_options(arch)}
    want = {(f"{name}_fp32_BKV256_CAUSAL1_FEAT{feat}_{extra}0", arch, "-O1")
            for name, extra in (("la_bwd_dq", "STATS"), ("la_bwd_dk", "WITH_DV")) for feat in spec.FEATURES
            for arch in archs}
    assert flagged == want
